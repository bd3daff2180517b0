#include "hooks/aoti_model.h"

#include <dlfcn.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <system_error>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/nearest.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "hooks/aoti_manifest.pb.h"

namespace kd {
namespace {

constexpr char kManifestKey[] = "libkd.manifest";

// A folder of libkd's own (in the system's temporary folder) that libtorch's loader extracts
// a package into: removed whole when this goes, so a failed load leaves nothing behind (the
// loader removes its own folder only when it was built).
class ExtractionFolder {
 public:
  ExtractionFolder() = default;
  explicit ExtractionFolder(std::string path) : path_(std::move(path)) {}
  ExtractionFolder(ExtractionFolder&& other) noexcept : path_(std::exchange(other.path_, "")) {}
  ExtractionFolder& operator=(ExtractionFolder&& other) noexcept {
    std::swap(path_, other.path_);
    return *this;
  }
  ~ExtractionFolder() {
    std::error_code error;
    if (!path_.empty()) std::filesystem::remove_all(path_, error);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class AotiModel final : public Model {
 public:
  AotiModel(std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader, AotiManifest manifest,
            std::string path, ExtractionFolder folder)
      : folder_(std::move(folder)),
        loader_(std::move(loader)),
        manifest_(std::move(manifest)),
        path_(std::move(path)) {
    calls_ = hooks_internal::BuildCalls(manifest_);
    module_paths_.insert(manifest_.module_paths().begin(), manifest_.module_paths().end());
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
      for (const hooks_internal::Call& call : calls_.at(hook.path)) {
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
      // The first exported paths (a package may export thousands: the message stays a line).
      constexpr size_t kListed = 8;
      std::vector<std::string> exported;
      for (const auto& [p, calls] : calls_) {
        if (exported.size() == kListed) break;
        exported.push_back(p);
      }
      const bool known = module_paths_.count(std::string(path)) > 0;
      std::string listed =
          exported.empty() ? "none" : absl::StrCat("\"", absl::StrJoin(exported, "\", \""), "\"");
      if (calls_.size() > kListed)
        absl::StrAppend(&listed, " and ", calls_.size() - kListed, " more");
      if (!known) {
        return absl::NotFoundError(absl::StrCat(
            "no module ", QuoteName(path), " in ", path_, "; ",
            Suggest(path, {manifest_.module_paths().begin(), manifest_.module_paths().end()})));
      }
      return absl::InvalidArgumentError(absl::StrCat(
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

  ExtractionFolder folder_;  // declared first: removed after the loader is gone
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader_;
  AotiManifest manifest_;
  std::string path_;
  std::map<std::string, std::vector<hooks_internal::Call>> calls_;
  std::unordered_set<std::string> module_paths_;  // the manifest's, for lookups
  std::map<int64_t, Hook> hooks_;
  int64_t next_id_ = 0;
  bool training_ = false;
};

// A new folder of libkd's own in the system's temporary folder.
absl::StatusOr<ExtractionFolder> MakeExtractionFolder() {
  std::error_code error;
  const std::filesystem::path base = std::filesystem::temp_directory_path(error);
  std::string pattern =
      ((error ? std::filesystem::path("/tmp") : base) / "libkd_aoti_XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot make a folder to extract the package in (",
                                               pattern, "): ", std::strerror(errno)));
  }
  return ExtractionFolder(pattern);
}

// `fn()` with TMPDIR set to `folder` (restored after, however fn ends). TMPDIR is the
// process's: one such call at a time.
template <typename Fn>
auto WithTmpdir(const ExtractionFolder& folder, Fn fn) {
  static std::mutex tmpdir_mutex;
  std::lock_guard<std::mutex> lock(tmpdir_mutex);
  const char* old_tmpdir = std::getenv("TMPDIR");
  const std::string saved = old_tmpdir != nullptr ? old_tmpdir : "";
  struct Restore {
    bool had;
    const std::string& value;
    ~Restore() {
      if (had) {
        ::setenv("TMPDIR", value.c_str(), 1);
      } else {
        ::unsetenv("TMPDIR");
      }
    }
  } restore{old_tmpdir != nullptr, saved};
  ::setenv("TMPDIR", folder.path().c_str(), 1);
  return fn();
}

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
  // Every entry's name and the extracted size, read by libkd before libtorch's loader
  // extracts anything.
  KD_RETURN_IF_ERROR(hooks_internal::CheckPackageEntries(path));
  LoadLibtorchBySoname();
  // What the package was compiled for, checked before its code is loaded: a CPU package's
  // kernels use the compiling machine's instruction sets (a CPU without them would die of an
  // illegal instruction), a CUDA package needs a GPU.
  // libtorch's loader extracts into a folder it makes under TMPDIR and leaves it behind when
  // it fails (its metadata reader too): both are pointed at a folder of libkd's own, removed
  // on every way out.
  KD_ASSIGN_OR_RETURN(ExtractionFolder folder, MakeExtractionFolder());
  absl::StatusOr<std::unordered_map<std::string, std::string>> target = CallTorchWith(
      [&] {
        return WithTmpdir(folder, [&] {
          return torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(path,
                                                                                     "model");
        });
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
    const std::vector<std::string> missing = hooks_internal::MissingCpuIsa(
        isa->second, [](const std::string& name) { return hooks_internal::CpuSupports(name); });
    if (!missing.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, " was compiled for instruction sets this CPU lacks (", absl::StrJoin(missing, ", "),
          "): export it again on this machine, or on one no newer than it"));
    }
  }
  absl::StatusOr<std::unique_ptr<torch::inductor::AOTIModelPackageLoader>> loader =
      CallTorchWith(
          [&] {
            return WithTmpdir(folder, [&] {
              return std::make_unique<torch::inductor::AOTIModelPackageLoader>(
                  path, "model", options.single_threaded);
            });
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
  // Parsed without protobuf's own error log (a second line on stderr): the message says it.
  struct Silent : google::protobuf::io::ErrorCollector {
    void AddError(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  } silent;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&silent);
  if (!parser.ParseFromString(it->second, &manifest) || manifest.num_model_outputs() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": its libkd manifest does not parse as kd.AotiManifest with "
                     "num_model_outputs >= 1; re-export it with tools/export_teacher.py"));
  }
  if (absl::Status checked = hooks_internal::CheckManifest(manifest); !checked.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", checked.message()));
  }
  return std::make_unique<AotiModel>(*std::move(loader), std::move(manifest), path,
                                     std::move(folder));
}

}  // namespace kd
