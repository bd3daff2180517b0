#include "hooks/aoti_model.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/nearest.h"
#include "base/torch_status.h"
#include "google/protobuf/text_format.h"
#include "hooks/aoti_manifest.pb.h"

namespace kd {
namespace {

constexpr char kManifestKey[] = "libkd.manifest";

// The values of one call of a hooked module: its exported positional arguments, its output.
struct Call {
  std::vector<std::pair<int, size_t>> args;  // (argument number, index into the outputs)
  std::optional<size_t> output;
};

class AotiModel final : public Model {
 public:
  AotiModel(std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader, AotiManifest manifest,
            std::string path)
      : loader_(std::move(loader)), manifest_(std::move(manifest)), path_(std::move(path)) {
    for (int i = 0; i < manifest_.values_size(); ++i) {
      const AotiManifest::Value& v = manifest_.values(i);
      std::vector<Call>& calls = calls_[v.path()];
      if (calls.size() <= static_cast<size_t>(v.call())) calls.resize(v.call() + 1);
      const size_t index = static_cast<size_t>(manifest_.num_model_outputs() + i);
      if (v.io() == AotiManifest::Value::OUTPUT) {
        calls[v.call()].output = index;
      } else {
        calls[v.call()].args.emplace_back(v.arg(), index);
      }
    }
    for (auto& [path, calls] : calls_) {
      for (Call& call : calls) std::sort(call.args.begin(), call.args.end());
    }
  }

  std::string kind() const override { return "aoti"; }

  c10::IValue Forward(std::vector<c10::IValue> args, const Kwargs& kwargs) override {
    TORCH_CHECK(kwargs.empty(), "an AOTInductor package takes positional tensors, no kwargs");
    TORCH_CHECK(!training_,
                "an AOTInductor package runs in eval mode only (its program is compiled for "
                "inference)");
    std::vector<at::Tensor> inputs;
    for (const c10::IValue& a : args) {
      TORCH_CHECK(a.isTensor(), "an AOTInductor package takes tensors, got a ", a.tagKind());
      inputs.push_back(a.toTensor());
    }
    std::vector<at::Tensor> outputs = loader_->run(inputs);
    const size_t own = static_cast<size_t>(manifest_.num_model_outputs());
    TORCH_CHECK(outputs.size() == own + static_cast<size_t>(manifest_.values_size()), path_,
                ": the package returned ", outputs.size(), " values; its manifest names ",
                own + manifest_.values_size());
    c10::IValue result = own == 1
                             ? c10::IValue(outputs[0])
                             : c10::IValue(c10::ivalue::Tuple::create(std::vector<c10::IValue>(
                                   outputs.begin(), outputs.begin() + static_cast<int64_t>(own))));
    // Hooks run in the order they were added, each path's calls in order (the root last, as
    // it returns last).
    for (const auto& [id, hook] : hooks_) {
      if (hook.path.empty()) {
        hook.fn(args, result);
        continue;
      }
      for (const Call& call : calls_.at(hook.path)) {
        std::vector<c10::IValue> call_args;
        for (const auto& [arg, index] : call.args) call_args.push_back(outputs[index]);
        hook.fn(call_args, call.output ? c10::IValue(outputs[*call.output]) : c10::IValue());
      }
    }
    return result;
  }

  std::vector<ModuleInfo> NamedModules() const override {
    std::vector<ModuleInfo> modules;
    for (int i = 0; i < manifest_.module_paths_size(); ++i) {
      const std::string& path = manifest_.module_paths(i);
      modules.push_back(
          {path, i < manifest_.module_types_size() ? manifest_.module_types(i) : std::string("?")});
    }
    if (modules.empty()) modules.push_back({"", "AOTInductorPackage"});
    return modules;
  }
  std::vector<NamedTensor> NamedParameters() const override { return {}; }
  std::vector<NamedTensor> NamedBuffers() const override { return {}; }

  void SetTraining(bool training) override { training_ = training; }
  bool is_training() const override { return training_; }

  absl::StatusOr<HookHandle> AddHook(
      absl::string_view path, HookFn fn,
      HookValues /*values: outputs are the program's own*/) override {
    if (!path.empty() && calls_.count(std::string(path)) == 0) {
      std::vector<std::string> exported;
      for (const auto& [p, calls] : calls_) exported.push_back(p);
      const bool known = std::find(manifest_.module_paths().begin(), manifest_.module_paths().end(),
                                   path) != manifest_.module_paths().end();
      const std::string listed =
          exported.empty() ? "none" : absl::StrCat("\"", absl::StrJoin(exported, "\", \""), "\"");
      if (!known) {
        return absl::NotFoundError(absl::StrCat(
            "no module ", QuoteName(path), " in ", path_, "; ",
            Suggest(path, {manifest_.module_paths().begin(), manifest_.module_paths().end()})));
      }
      return absl::FailedPreconditionError(absl::StrCat(
          path_, " was not exported with the values of ", QuoteName(path), " (exported: ", listed,
          "); re-export it with tools/export_teacher.py --hooks=", path, ":output,..."));
    }
    const int64_t id = next_id_++;
    hooks_.emplace(id, Hook{std::string(path), std::move(fn)});
    return HookHandle([this, id] { hooks_.erase(id); });
  }

  // Outputs are the program's own, never written later.
  bool knows_later_writes() const override { return true; }

  absl::Status CheckHooksFired() const override { return absl::OkStatus(); }

 private:
  struct Hook {
    std::string path;
    HookFn fn;
  };

  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader_;
  AotiManifest manifest_;
  std::string path_;
  std::map<std::string, std::vector<Call>> calls_;
  std::map<int64_t, Hook> hooks_;
  int64_t next_id_ = 0;
  bool training_ = false;
};

}  // namespace

namespace aoti_internal {

std::vector<std::string> MissingCpuIsa(const std::string& isa_list,
                                       const std::function<bool(const std::string&)>& supports) {
  std::vector<std::string> missing;
  for (absl::string_view name : absl::StrSplit(isa_list, ' ', absl::SkipEmpty())) {
    if (!supports(std::string(name))) missing.emplace_back(name);
  }
  return missing;
}

bool CpuSupports(const std::string& isa) {
  // The names Inductor writes (torch/_inductor/cpu_vec_isa.py), by the CPU's own flags.
  if (isa == "AVX2") return __builtin_cpu_supports("avx2");
  if (isa == "AVX512") {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }
  if (isa == "AVX512_VNNI") return __builtin_cpu_supports("avx512vnni");
  if (isa == "AVX512_BF16") return __builtin_cpu_supports("avx512bf16");
  return true;  // a name not known here: left to the loader
}

}  // namespace aoti_internal

namespace {

// A package's compiled model links libtorch.so by name; a program linked against
// libtorch_cpu.so alone (as libkd's are) has not loaded it, and dlopen of the model would not
// find it. Loads the libtorch.so beside the libtorch_cpu.so this process runs, once.
void LoadLibtorchBySoname() {
  static const bool loaded = [] {
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&at::globalContext), &info) == 0 ||
        info.dli_fname == nullptr) {
      return false;
    }
    const std::filesystem::path torch =
        std::filesystem::path(info.dli_fname).parent_path() / "libtorch.so";
    return dlopen(torch.c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr;
  }();
  (void)loaded;  // without it, the loader's dlopen error names what is missing
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadAotiModel(const std::string& path,
                                                     const AotiOptions& options) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    return absl::NotFoundError(absl::StrCat("no AOTInductor package ", path));
  }
  {
    std::ifstream file(path, std::ios::binary);
    char magic[2] = {0, 0};
    file.read(magic, 2);
    if (magic[0] != 'P' || magic[1] != 'K') {
      return absl::InvalidArgumentError(
          absl::StrCat(path,
                       " is not an AOTInductor package (not a zip file): make one with "
                       "tools/export_teacher.py"));
    }
  }
  LoadLibtorchBySoname();
  // What the package was compiled for, checked before its code is loaded: a CPU package's
  // kernels use the compiling machine's instruction sets (a CPU without them would die of an
  // illegal instruction), a CUDA package needs a GPU.
  absl::StatusOr<std::unordered_map<std::string, std::string>> target = internal::CallTorchWith(
      [&] {
        return torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(path, "model");
      },
      [&](const std::exception& e) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": cannot load the AOTInductor package: ", TorchErrorLine(e)));
      });
  if (!target.ok()) return target.status();
  if (auto device = target->find("AOTI_DEVICE_KEY");
      device != target->end() && device->second == "cuda" && !at::hasCUDA()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     " was compiled for CUDA and this machine has no GPU: export it with "
                     "tools/export_teacher.py --device=cpu"));
  }
  if (auto isa = target->find("AOTI_CPU_ISA"); isa != target->end()) {
    const std::vector<std::string> missing = aoti_internal::MissingCpuIsa(
        isa->second, [](const std::string& name) { return aoti_internal::CpuSupports(name); });
    if (!missing.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, " was compiled for instruction sets this CPU lacks (", absl::StrJoin(missing, ", "),
          "): export it again on this machine, or on one no newer than it"));
    }
  }
  absl::StatusOr<std::unique_ptr<torch::inductor::AOTIModelPackageLoader>> loader =
      internal::CallTorchWith(
          [&] {
            return std::make_unique<torch::inductor::AOTIModelPackageLoader>(
                path, "model", options.single_threaded);
          },
          [&](const std::exception& e) {
            return absl::InvalidArgumentError(
                absl::StrCat(path, ": cannot load the AOTInductor package: ", TorchErrorLine(e)));
          });
  if (!loader.ok()) return loader.status();
  const std::unordered_map<std::string, std::string> metadata = (*loader)->get_metadata();
  auto it = metadata.find(kManifestKey);
  if (it == metadata.end()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " has no libkd manifest (metadata \"",
                                                   kManifestKey,
                                                   "\"): export it with tools/export_teacher.py"));
  }
  AotiManifest manifest;
  if (!google::protobuf::TextFormat::ParseFromString(it->second, &manifest) ||
      manifest.num_model_outputs() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": its libkd manifest does not parse as kd.AotiManifest with "
                     "num_model_outputs >= 1; re-export it with tools/export_teacher.py"));
  }
  return std::make_unique<AotiModel>(*std::move(loader), std::move(manifest), path);
}

}  // namespace kd
