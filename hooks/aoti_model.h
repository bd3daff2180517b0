// An AOTInductor package (torch._inductor.aoti_compile_and_package of a torch.export program)
// as a kd::Model: a frozen teacher with Inductor's compiled kernels, run by libtorch's
// torch::inductor::AOTIModelPackageLoader.
//
//   // python tools/export_teacher.py --model=... --hooks=layer1:output --out=teacher.pt2
//   KD_ASSIGN_OR_RETURN(std::unique_ptr<kd::Model> teacher, kd::LoadAotiModel("teacher.pt2"));
//   KD_ASSIGN_OR_RETURN(kd::HookHandle h, teacher->AddHook("layer1", fn));  // an exported value
//   c10::IValue logits = teacher->Forward({x});
//
// A compiled program has no forward hooks: tools/export_teacher.py exports the values of the
// module paths a config will hook as extra outputs and names them in the package's metadata
// (hooks/aoti_manifest.proto). Hooks on those paths get them after each forward, call by call,
// in the order the model ran them; a hook on a path the package was not exported with is
// FailedPrecondition naming the exported paths and the re-export. The package has no
// parameters to train or load (its weights are compiled in): NamedParameters is empty, it runs
// in eval mode only, and it runs on the device it was compiled for.
#ifndef LIBKD_HOOKS_AOTI_MODEL_H_
#define LIBKD_HOOKS_AOTI_MODEL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "hooks/aoti_manifest.pb.h"
#include "hooks/model.h"

namespace kd {

struct AotiOptions {
  // AOTIModelPackageLoader's run_single_threaded: the package's kernels on the calling
  // thread only (as a one-thread run wants).
  bool single_threaded = false;
};

// The package at `path`. NotFound for a missing file; InvalidArgument, one line naming the
// file, for a file that is not a package (not a zip, no model inside, no libkd manifest) or
// one this machine cannot run (compiled for CUDA without a GPU, or for instruction sets this
// CPU lacks: checked before the package's code is loaded).
absl::StatusOr<std::unique_ptr<Model>> LoadAotiModel(const std::string& path,
                                                     const AotiOptions& options = {});

namespace hooks_internal {

// The names in `isa_list` (a package's AOTI_CPU_ISA, "AVX512 AVX512_VNNI") that `supports` says
// no to. Exposed for tests.
std::vector<std::string> MissingCpuIsa(const std::string& isa_list,
                                       const std::function<bool(const std::string&)>& supports);
// Whether this CPU has the instruction set Inductor names `isa` (unknown names: false, so a
// package compiled for an instruction set libkd cannot check is refused, not run into SIGILL).
bool CpuSupports(const std::string& isa);

// Bounds on what a package may ask for, checked before libtorch's loader sees it.
inline constexpr int kMaxManifestOutputs = 1 << 16;  // model outputs, hooked values
inline constexpr int kMaxManifestArgs = 256;         // positional arguments of one call
inline constexpr int kMaxPackageEntries = 1 << 16;
inline constexpr int64_t kMaxPackageExtractedBytes = int64_t{16} << 30;  // 16 GiB

// The values of one call of a hooked module: its exported positional arguments (argument
// number, index into the package's outputs), its output's index.
struct Call {
  std::vector<std::pair<int, size_t>> args;
  std::optional<size_t> output;
};
// Each hooked path's calls, in order, from a manifest CheckManifest accepted.
std::map<std::string, std::vector<Call>> BuildCalls(const AotiManifest& manifest);

// OK if every value's call and argument number and the output counts are in range (a call of
// -1 or 2e9 made the model index out of its vectors or allocate without end).
absl::Status CheckManifest(const AotiManifest& manifest);

// OK if the zip at `path` extracts inside its folder (no absolute entry name, no "..", no
// backslash) to at most kMaxPackageExtractedBytes in at most kMaxPackageEntries entries;
// InvalidArgument naming the file and the entry otherwise.
absl::Status CheckPackageEntries(const std::string& path);

}  // namespace hooks_internal
}  // namespace kd

#endif  // LIBKD_HOOKS_AOTI_MODEL_H_
