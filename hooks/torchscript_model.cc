#include "hooks/torchscript_model.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/serialization/import.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "base/nearest.h"
#include "base/status_macros.h"
#include "base/torch_file.h"
#include "base/torch_status.h"
#include "hooks/internal/graph_transforms.h"
#include "hooks/internal/tap_list.h"

namespace kd {
namespace {

std::string ShortTypeName(const torch::jit::Module& module) {
  return module.type()->name() ? module.type()->name()->name() : module.type()->str();
}

// A copy of forward's graph with taps, compiled into a function that runs with the module as
// `self`; it receives its own taps and hands them to the model's tap list.
class CompiledForward final : public hooks_internal::TapSink {
 public:
  CompiledForward(hooks_internal::TapList* taps) : taps_(taps) {}

  void OnTap(int64_t site, c10::ArrayRef<c10::IValue> args, const c10::IValue& output,
             c10::ArrayRef<c10::IValue> args_now, const c10::IValue& output_now) override {
    // The values are the interpreter's (or the tap's copies), alive and unchanged while the
    // taps run.
    taps_->Dispatch(site_ids[site], args, output, args_now, output_now);
  }

  int64_t address() const {
    return static_cast<int64_t>(
        reinterpret_cast<intptr_t>(static_cast<const hooks_internal::TapSink*>(this)));
  }

  hooks_internal::TappedGraph tapped;  // the graph with taps (internal/graph_transforms.h)
  std::vector<int> site_ids;           // a tap's site index -> the tap list's id of its path
  std::unique_ptr<torch::jit::GraphFunction> function;

 private:
  hooks_internal::TapList* taps_;
};

class TorchScriptModel final : public Model {
 public:
  explicit TorchScriptModel(torch::jit::Module module) : module_(std::move(module)) {}

  std::string kind() const override { return "torchscript"; }

  c10::IValue Forward(std::vector<c10::IValue> args, const Kwargs& kwargs) override {
    if (dirty_) Rebuild();
    return Run(tapped_.get(), std::move(args), kwargs);
  }

  absl::StatusOr<c10::IValue> ForwardTruncated(
      std::vector<c10::IValue> args, const Kwargs& kwargs,
      const std::vector<std::string>& stop_after) override {
    std::vector<std::string> paths = stop_after;
    std::sort(paths.begin(), paths.end());
    paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
    for (const std::string& path : paths) {
      if (path.empty()) {
        return absl::InvalidArgumentError(
            "cannot truncate after the root module \"\": that is the whole "
            "forward");
      }
      if (absl::Status s = CheckModulePath(path); !s.ok()) return s;
    }
    // Cut graphs depend on their paths and on which of them copy what is written later.
    std::string key = absl::StrJoin(paths, ",");
    for (const std::string& path : taps_.AsReturnedPaths()) absl::StrAppend(&key, "|", path);
    auto it = truncated_.find(key);
    if (it == truncated_.end()) {
      auto compiled = std::make_unique<CompiledForward>(&taps_);
      absl::Status built = CallTorch([&] { BuildTruncated(paths, *compiled); },
                                     absl::StatusCode::kFailedPrecondition);
      if (!built.ok()) return built;
      it = truncated_.emplace(key, std::move(compiled)).first;
    }
    return CallTorch(
        [&] { return Run(it->second.get(), std::move(args), kwargs, /*tap_root=*/false); });
  }

  std::vector<ModuleInfo> NamedModules() const override {
    std::vector<ModuleInfo> out;
    for (const auto& item : module_.named_modules()) {
      out.push_back(ModuleInfo{item.name, ShortTypeName(item.value)});
    }
    return out;
  }

  std::vector<NamedTensor> NamedParameters() const override {
    std::vector<NamedTensor> out;
    for (const auto& item : module_.named_parameters(/*recurse=*/true)) {
      out.emplace_back(item.name, item.value);
    }
    return out;
  }

  std::vector<NamedTensor> NamedBuffers() const override {
    std::vector<NamedTensor> out;
    for (const auto& item : module_.named_buffers(/*recurse=*/true)) {
      out.emplace_back(item.name, item.value);
    }
    return out;
  }

  void SetTraining(bool training) override { module_.train(training); }
  bool is_training() const override { return module_.is_training(); }

  absl::StatusOr<HookHandle> AddHook(absl::string_view path, HookFn fn,
                                     HookValues values) override {
    if (absl::Status s = CheckModulePath(path); !s.ok()) return s;
    std::string key(path);
    if (!key.empty() && values == HookValues::kAsReturned && !taps_.AsReturnedPaths().count(key)) {
      dirty_ = true;  // the taps on this path now copy what is written later
    }
    if (!key.empty() && !taps_.HasPath(key)) {
      // Build the graph now, so that a module forward never calls is reported here.
      absl::Status built = CallTorch(
          [&] {
            CompiledForward probe(&taps_);
            BuildTappedGraph({key}, probe);
          },
          absl::StatusCode::kFailedPrecondition);
      if (!built.ok()) return built;
      dirty_ = true;
    }
    return taps_.Add(std::move(key), std::move(fn), values,
                     [this](const hooks_internal::TapList::Tap&) { dirty_ = true; });
  }

  bool knows_later_writes() const override { return true; }

  absl::StatusOr<std::unique_ptr<Model>> Submodel(absl::string_view path) const override {
    if (absl::Status found = CheckModulePath(path); !found.ok()) return found;
    torch::jit::Module module = module_;
    for (absl::string_view name : absl::StrSplit(path, '.', absl::SkipEmpty())) {
      module = module.attr(std::string(name)).toModule();
    }
    if (!module.find_method("forward").has_value()) {
      return absl::FailedPreconditionError(
          absl::StrCat("module ", QuoteName(path), " (", ShortTypeName(module),
                       ") has no forward in this TorchScript archive (nothing calls it), so it "
                       "cannot run on its own"));
    }
    return std::unique_ptr<Model>(std::make_unique<TorchScriptModel>(module));
  }

  absl::Status CheckHooksFired() const override {
    // Every tapped call site in a TorchScript graph is a hook point: nothing can be bypassed.
    return absl::OkStatus();
  }

  const torch::jit::Module& module() const { return module_; }

 private:
  // Runs `compiled` (or the module's own forward if null) and, if `tap_root`, the root taps.
  c10::IValue Run(CompiledForward* compiled, std::vector<c10::IValue> args, const Kwargs& kwargs,
                  bool tap_root = true) {
    tap_root = tap_root && taps_.HasPath(hooks_internal::TapList::kRootPathId);
    std::vector<c10::IValue> root_args;
    if (tap_root) root_args = args;
    c10::IValue output;
    if (compiled == nullptr) {
      output = module_.forward(std::move(args), kwargs);
    } else {
      torch::jit::Stack stack = std::move(args);
      stack.insert(stack.begin(), module_._ivalue());
      module_.get_method("forward").function().getSchema().checkAndNormalizeInputs(stack, kwargs);
      compiled->function->run(stack);
      output = torch::jit::pop(stack);
    }
    if (tap_root) {
      taps_.Dispatch(hooks_internal::TapList::kRootPathId, root_args, output, root_args, output);
    }
    return output;
  }

  void Rebuild() {
    dirty_ = false;
    tapped_.reset();  // cut graphs stay: their key holds what they depend on
    std::vector<std::string> paths = taps_.Paths();
    paths.erase(std::remove(paths.begin(), paths.end(), std::string()), paths.end());
    if (paths.empty()) return;
    auto compiled = std::make_unique<CompiledForward>(&taps_);
    BuildTappedGraph(paths, *compiled);
    Compile(*compiled);
    tapped_ = std::move(compiled);
  }

  // The tapped copy of forward's graph (hooks_internal::InsertTaps) into `out`. Throws naming a
  // path forward never calls.
  void BuildTappedGraph(const std::vector<std::string>& paths, CompiledForward& out) {
    const torch::jit::GraphFunction& forward =
        torch::jit::toGraphFunction(module_.get_method("forward").function());
    out.tapped =
        hooks_internal::InsertTaps(*forward.graph(), paths, out.address(), taps_.AsReturnedPaths());
    if (!out.tapped.missing.empty()) {
      const std::string& path = out.tapped.missing.front();
      TORCH_CHECK(false, "module \"", path, "\" (", ModuleType(path),
                  ") exists but forward never calls it, so it has no output to "
                  "capture");
    }
  }

  void Compile(CompiledForward& compiled) {
    compiled.tapped.tapped_calls.clear();
    compiled.site_ids.clear();
    for (const std::string& path : compiled.tapped.sites) {
      compiled.site_ids.push_back(taps_.PathId(path));
    }
    hooks_internal::SinkTaps(compiled.tapped.graph);
    hooks_internal::MergeTaps(*compiled.tapped.graph);
    compiled.function = std::make_unique<torch::jit::GraphFunction>(
        c10::QualifiedName("__kd_tapped_forward"), compiled.tapped.graph, nullptr);
  }

  // The tapped graph of `paths`, cut after their last calls (hooks_internal::Truncate). Throws
  // (FailedPrecondition) where the cut would change a captured value.
  void BuildTruncated(const std::vector<std::string>& paths, CompiledForward& out) {
    BuildTappedGraph(paths, out);
    if (std::optional<std::string> refused = hooks_internal::Truncate(out.tapped, paths)) {
      TORCH_CHECK(false, *refused);
    }
    Compile(out);
  }

  std::string ModuleType(const std::string& path) const {
    for (const ModuleInfo& m : NamedModules()) {
      if (m.path == path) return m.type;
    }
    return "?";
  }

  torch::jit::Module module_;
  hooks_internal::TapList taps_;
  bool dirty_ = false;
  std::unique_ptr<CompiledForward> tapped_;  // null: run the module's own forward
  std::map<std::string, std::unique_ptr<CompiledForward>> truncated_;  // by joined paths
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadTorchScriptModel(const std::string& path) {
  // Read the bytes ourselves, so that a missing or unreadable file gets errno's reason.
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<TorchArchive> archive =
      CheckTorchArchive(*bytes, TorchArchive::Kind::kTorchScript);
  if (!archive.ok()) {
    return WithContext(path, archive.status());
  }
  absl::StatusOr<torch::jit::Module> module = CallTorch(
      [&] {
        std::istringstream stream(*bytes);
        return torch::jit::load(stream, c10::Device(c10::kCPU));
      },
      absl::StatusCode::kInvalidArgument);
  if (!module.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": libtorch cannot load this TorchScript archive: ", module.status().message()));
  }
  return std::unique_ptr<Model>(std::make_unique<TorchScriptModel>(*std::move(module)));
}

std::unique_ptr<Model> MakeTorchScriptModel(const torch::jit::Module& module) {
  return std::make_unique<TorchScriptModel>(module);
}

const torch::jit::Module* GetTorchScriptModule(const Model& model) {
  const auto* ts = dynamic_cast<const TorchScriptModel*>(&model);
  return ts == nullptr ? nullptr : &ts->module();
}

}  // namespace kd
