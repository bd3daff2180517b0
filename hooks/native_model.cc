#include "hooks/native_model.h"

#include <optional>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/torch_status.h"
#include "hooks/hook_point.h"
#include "hooks/internal/native_module_forwards.h"
#include "hooks/internal/tap_list.h"

namespace kd {
namespace hooks_internal {

void CheckCall(const std::string& type, size_t expected_args, size_t actual_args,
               const Kwargs& kwargs) {
  TORCH_CHECK(kwargs.empty(), type, ".forward takes no keyword arguments through ",
              "MakeNativeModel's deduced forward; pass them positionally or give "
              "MakeNativeModel a NativeForwardFn that reads them");
  TORCH_CHECK(expected_args == actual_args, type, ".forward takes ", expected_args,
              " argument(s), got ", actual_args);
}

}  // namespace hooks_internal

std::string NativeTypeName(const torch::nn::Module& module) {
  std::string name = module.name();
  // Drop template arguments, then the namespaces, then libtorch's "Impl" suffix.
  if (const size_t angle = name.find('<'); angle != std::string::npos) name.resize(angle);
  if (const size_t colon = name.rfind("::"); colon != std::string::npos) {
    name = name.substr(colon + 2);
  }
  if (absl::EndsWith(name, "Impl") && name.size() > 4) name.resize(name.size() - 4);
  return name;
}

namespace {

class NativeModel final : public Model {
 public:
  NativeModel(std::shared_ptr<torch::nn::Module> root, NativeForwardFn forward)
      : root_(std::move(root)), forward_(std::move(forward)) {}

  std::string kind() const override { return "native"; }

  c10::IValue Forward(std::vector<c10::IValue> args, const Kwargs& kwargs) override {
    const bool tap_root = taps_.HasPath(hooks_internal::TapList::kRootPathId);
    std::vector<c10::IValue> root_args;
    if (tap_root) root_args = args;
    c10::IValue output = forward_(args, kwargs);
    ++forwards_;
    if (tap_root) {
      taps_.Dispatch(hooks_internal::TapList::kRootPathId, root_args, output, root_args, output);
    }
    return output;
  }

  absl::StatusOr<c10::IValue> ForwardTruncated(
      std::vector<c10::IValue> args, const Kwargs& kwargs,
      const std::vector<std::string>& stop_after) override {
    auto modules = root_->named_modules();
    std::set<std::string> pending;
    for (const std::string& path : stop_after) {
      if (path.empty()) {
        return absl::InvalidArgumentError(
            "cannot truncate after the root module \"\": that is the whole "
            "forward");
      }
      if (absl::Status s = CheckModulePath(path); !s.ok()) return s;
      pending.insert(path);
    }
    // Early exit: once every module in `stop_after` has run (and its taps, registered
    // earlier, have fired), a hook throws; the exception unwinds the rest of forward.
    struct StopForward {};
    std::vector<HookHandle> stops;  // removed on return
    for (const std::string& path : std::set<std::string>(pending)) {
      stops.push_back(AddNativeHook(
          *modules[path], [&pending, path](const std::vector<c10::IValue>&, const c10::IValue&) {
            pending.erase(path);
            if (pending.empty()) throw StopForward{};
          }));
    }
    ++forwards_;
    try {
      return CallTorch([&] { return forward_(args, kwargs); });
    } catch (const StopForward&) {
      return c10::IValue();
    }
  }

  std::vector<ModuleInfo> NamedModules() const override {
    std::vector<ModuleInfo> out;
    for (const auto& item : root_->named_modules()) {
      out.push_back(ModuleInfo{item.key(), NativeTypeName(*item.value())});
    }
    return out;
  }

  std::vector<NamedTensor> NamedParameters() const override {
    std::vector<NamedTensor> out;
    for (const auto& item : root_->named_parameters(/*recurse=*/true)) {
      out.emplace_back(item.key(), item.value());
    }
    return out;
  }

  std::vector<NamedTensor> NamedBuffers() const override {
    std::vector<NamedTensor> out;
    for (const auto& item : root_->named_buffers(/*recurse=*/true)) {
      out.emplace_back(item.key(), item.value());
    }
    return out;
  }

  void SetTraining(bool training) override { root_->train(training); }
  bool is_training() const override { return root_->is_training(); }

  absl::StatusOr<HookHandle> AddHook(absl::string_view path, HookFn fn,
                                     HookValues values) override {
    if (absl::Status s = CheckModulePath(path); !s.ok()) return s;
    std::string key(path);
    // The root's values: the forward is over, nothing can write them any more.
    if (key.empty()) return taps_.Add(std::move(key), std::move(fn), values);
    std::shared_ptr<torch::nn::Module> module = root_->named_modules()[key];
    // The tap list keeps the callback; the module's hook-point entry feeds it, and goes with
    // the tap.
    HookHandle handle = taps_.Add(std::move(key), std::move(fn), values);
    all_fired_ = false;
    const std::shared_ptr<hooks_internal::TapList::Tap>& tap = taps_.back();
    tap->forwards_at_add = forwards_;
    // The feed holds the tap (a call in flight may outlive its removal); the tap list breaks
    // that cycle by resetting the feed when the tap goes.
    tap->feed = AddNativeHook(
        *module,
        [tap](const std::vector<c10::IValue>& args, const c10::IValue& output) {
          hooks_internal::TapList::Fire(*tap, args, output);
        },
        values);
    return handle;
  }

  absl::Status CheckHooksFired() const override {
    // A tap that fired stays fired: once all have, only a new tap can fail the check.
    if (all_fired_) return absl::OkStatus();
    std::vector<std::string> silent;
    bool all_fired = true;
    for (const auto& tap : taps_.taps()) {
      all_fired = all_fired && (tap->path.empty() || tap->fired.load(std::memory_order_relaxed));
      // A model that has not run since the tap was added (a teacher-only evaluation with a
      // manager that also hooks this student) has bypassed nothing.
      if (!tap->fired.load(std::memory_order_relaxed) && !tap->path.empty() &&
          forwards_ > tap->forwards_at_add) {
        silent.push_back(tap->path);
      }
    }
    if (silent.empty()) {
      all_fired_ = all_fired;
      return absl::OkStatus();
    }
    auto modules = root_->named_modules();
    for (std::string& path : silent) {
      path = absl::StrCat("\"", path, "\" (", NativeTypeName(*modules[path]), ")");
    }
    return NeverRanThroughHookPointError(silent);
  }

  absl::StatusOr<std::unique_ptr<Model>> Submodel(absl::string_view path) const override {
    if (absl::Status found = CheckModulePath(path); !found.ok()) return found;
    if (path.empty()) return MakeNativeModel(root_, forward_);
    auto modules = root_->named_modules();
    std::shared_ptr<torch::nn::Module> module = modules[std::string(path)];
    const size_t dot = path.rfind('.');
    const torch::nn::Module* parent = dot == absl::string_view::npos
                                          ? root_.get()
                                          : modules[std::string(path.substr(0, dot))].get();
    std::optional<NativeForwardFn> forward = hooks_internal::ModuleForward(module, parent);
    if (!forward.has_value()) {
      const std::string type = NativeTypeName(*module);
      return absl::FailedPreconditionError(absl::StrCat(
          "module \"", path, "\" (", type,
          ") cannot run on its own: libkd does not know how to call its forward; register it "
          "with kd::RegisterNativeModuleForward<",
          type, "Impl>() (hooks/native_model.h) or keep it in a torch::nn::Sequential"));
    }
    return MakeNativeModel(std::move(module), *std::move(forward));
  }

  const std::shared_ptr<torch::nn::Module>& root() const { return root_; }

 private:
  std::shared_ptr<torch::nn::Module> root_;
  NativeForwardFn forward_;
  hooks_internal::TapList taps_;
  // Forwards run (whole or truncated), for CheckHooksFired.
  int64_t forwards_ = 0;
  // Whether CheckHooksFired saw every tap fired (taps added since clear it).
  mutable bool all_fired_ = false;
};

}  // namespace

std::unique_ptr<Model> MakeNativeModel(std::shared_ptr<torch::nn::Module> root,
                                       NativeForwardFn forward) {
  return std::make_unique<NativeModel>(std::move(root), std::move(forward));
}

std::shared_ptr<torch::nn::Module> GetNativeModule(const Model& model) {
  const auto* native = dynamic_cast<const NativeModel*>(&model);
  return native == nullptr ? nullptr : native->root();
}

}  // namespace kd
