#include "hooks/aoti_model.h"

#include <dlfcn.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <cstdint>
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
#include "absl/strings/escaping.h"
#include "base/file_util.h"
#include "base/nearest.h"
#include "base/status_macros.h"
#include "base/torch_archive.h"
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
    calls_ = aoti_internal::BuildCalls(manifest_);
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
      for (const aoti_internal::Call& call : calls_.at(hook.path)) {
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
      if (calls_.size() > kListed) absl::StrAppend(&listed, " and ", calls_.size() - kListed, " more");
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
  std::map<std::string, std::vector<aoti_internal::Call>> calls_;
  std::unordered_set<std::string> module_paths_;  // the manifest's, for lookups
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
  // The names Inductor writes (torch/_inductor/cpu_vec_isa.py, upper-cased), by the CPU's own
  // flags. A name not known here is taken as missing: a package whose kernels use an
  // instruction set libkd cannot check would die of an illegal instruction, not fail cleanly.
  if (isa == "INVALID_VEC_ISA") return true;  // Inductor's name for scalar code: runs anywhere
#if defined(__x86_64__) || defined(__i386__)
  if (isa == "AVX2") return __builtin_cpu_supports("avx2");
  if (isa == "AVX512") {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }
  if (isa == "AVX512_VNNI") return __builtin_cpu_supports("avx512vnni");
  if (isa == "AVX512_BF16") return __builtin_cpu_supports("avx512bf16");
  if (isa == "AMX_TILE") return __builtin_cpu_supports("amx-tile");
#endif
  return false;
}

absl::Status CheckManifest(const AotiManifest& manifest) {
  std::vector<std::string> problems;
  if (manifest.num_model_outputs() < 1 || manifest.num_model_outputs() > kMaxManifestOutputs) {
    problems.push_back(absl::StrCat("num_model_outputs ", manifest.num_model_outputs(),
                                    " is not in [1, ", kMaxManifestOutputs, "]"));
  }
  if (manifest.module_paths_size() > kMaxManifestOutputs ||
      manifest.module_types_size() > kMaxManifestOutputs) {
    problems.push_back(absl::StrCat(std::max(manifest.module_paths_size(),
                                             manifest.module_types_size()),
                                    " module paths or types, more than ", kMaxManifestOutputs));
  }
  if (manifest.values_size() > kMaxManifestOutputs) {
    problems.push_back(absl::StrCat(manifest.values_size(), " values, more than ",
                                    kMaxManifestOutputs));
  }
  // Each call of a module has at least one value, so a call's number is below the count of
  // values; an argument's number is below the most arguments a Python call takes.
  for (int i = 0; i < manifest.values_size() && problems.size() < 3; ++i) {
    const AotiManifest::Value& v = manifest.values(i);
    if (v.path().empty()) problems.push_back(absl::StrCat("values[", i, "] has no path"));
    if (v.call() < 0 || v.call() >= manifest.values_size()) {
      problems.push_back(absl::StrCat("values[", i, "].call ", v.call(), " is not in [0, ",
                                      manifest.values_size(), ")"));
    }
    if (v.arg() < 0 || v.arg() >= kMaxManifestArgs) {
      problems.push_back(
          absl::StrCat("values[", i, "].arg ", v.arg(), " is not in [0, ", kMaxManifestArgs, ")"));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "its libkd manifest is out of range (", absl::StrJoin(problems, "; "),
      "); re-export it with tools/export_teacher.py"));
}

std::map<std::string, std::vector<Call>> BuildCalls(const AotiManifest& manifest) {
  std::map<std::string, std::vector<Call>> calls_by_path;
  for (int i = 0; i < manifest.values_size(); ++i) {
    const AotiManifest::Value& v = manifest.values(i);
    std::vector<Call>& calls = calls_by_path[v.path()];
    if (calls.size() <= static_cast<size_t>(v.call())) calls.resize(v.call() + 1);
    const size_t index = static_cast<size_t>(manifest.num_model_outputs() + i);
    if (v.io() == AotiManifest::Value::OUTPUT) {
      calls[v.call()].output = index;
    } else {
      calls[v.call()].args.emplace_back(v.arg(), index);
    }
  }
  for (auto& [path, calls] : calls_by_path) {
    for (Call& call : calls) std::sort(call.args.begin(), call.args.end());
  }
  return calls_by_path;
}

absl::Status CheckPackageEntries(const std::string& path) {
  KD_ASSIGN_OR_RETURN(const std::string bytes, ReadFile(path));
  absl::StatusOr<TorchArchive> archive = InspectTorchArchive(bytes);
  if (!archive.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is not an AOTInductor package (", archive.status().message(),
        "): make one with tools/export_teacher.py"));
  }
  if (archive->records.size() > static_cast<size_t>(kMaxPackageEntries)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": holds ", archive->records.size(), " entries, more than the ",
                     kMaxPackageEntries, " a package extracts; re-export it"));
  }
  uint64_t total = 0;
  for (const TorchArchive::Record& record : archive->records) {
    // libtorch's loader writes each entry at <temp folder>/<name>: a name that climbs out of
    // it, is absolute, or is a Windows path would be written wherever it points.
    const absl::string_view name = record.name;
    bool bad = name.empty() || name.front() == '/' || name.find('\\') != name.npos ||
               name.find('\0') != name.npos;
    for (absl::string_view part : absl::StrSplit(name, '/')) {
      if (part == "..") bad = true;
    }
    if (bad) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": entry \"", absl::CEscape(name.substr(0, 200)),
          "\" would be extracted outside the package's folder (an absolute name, a \"..\" or a "
          "backslash); libkd does not open such a package: re-export it"));
    }
    total += record.uncompressed_size;
    if (total > static_cast<uint64_t>(kMaxPackageExtractedBytes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": its entries extract to more than ", HumanBytes(kMaxPackageExtractedBytes),
          "; libkd does not open such a package: re-export it"));
    }
  }
  return absl::OkStatus();
}

}  // namespace aoti_internal

namespace {

// A package's compiled model links libtorch.so by name; a program linked against
// libtorch_cpu.so alone (as libkd's are) has not loaded it, and dlopen of the model would not
// find it. Loads the libtorch.so beside the libtorch_cpu.so this process runs, once.
absl::StatusOr<ExtractionFolder> MakeExtractionFolder() {
  std::error_code error;
  const std::filesystem::path base = std::filesystem::temp_directory_path(error);
  std::string pattern = ((error ? std::filesystem::path("/tmp") : base) / "libkd_aoti_XXXXXX").string();
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
  KD_RETURN_IF_ERROR(aoti_internal::CheckPackageEntries(path));
  LoadLibtorchBySoname();
  // What the package was compiled for, checked before its code is loaded: a CPU package's
  // kernels use the compiling machine's instruction sets (a CPU without them would die of an
  // illegal instruction), a CUDA package needs a GPU.
  // libtorch's loader extracts into a folder it makes under TMPDIR and leaves it behind when
  // it fails (its metadata reader too): both are pointed at a folder of libkd's own, removed
  // on every way out.
  KD_ASSIGN_OR_RETURN(ExtractionFolder folder, MakeExtractionFolder());
  absl::StatusOr<std::unordered_map<std::string, std::string>> target = internal::CallTorchWith(
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
            return WithTmpdir(folder, [&] {
              return std::make_unique<torch::inductor::AOTIModelPackageLoader>(
                  path, "model", options.single_threaded);
            });
          },          [&](const std::exception& e) {
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
  if (absl::Status checked = aoti_internal::CheckManifest(manifest); !checked.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", checked.message()));
  }
  return std::make_unique<AotiModel>(*std::move(loader), std::move(manifest), path,
                                     std::move(folder));
}

}  // namespace kd
