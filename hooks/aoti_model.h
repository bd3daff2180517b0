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

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
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

namespace aoti_internal {

// The names in `isa_list` (a package's AOTI_CPU_ISA, "AVX512 AVX512_VNNI") that `supports` says
// no to. Exposed for tests.
std::vector<std::string> MissingCpuIsa(const std::string& isa_list,
                                       const std::function<bool(const std::string&)>& supports);
// Whether this CPU has the instruction set Inductor names `isa` (unknown names: true).
bool CpuSupports(const std::string& isa);

}  // namespace aoti_internal
}  // namespace kd

#endif  // LIBKD_HOOKS_AOTI_MODEL_H_
