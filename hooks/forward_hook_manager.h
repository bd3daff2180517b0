// ForwardHookManager: records module inputs and outputs by module path into an I/O dict, as
// torchdistill's ForwardHookManager does, for TorchScript and native models alike.
//
//   kd::ForwardHookManager manager(c10::kCPU);
//   KD_RETURN_IF_ERROR(manager.AddHook(*teacher, "layer2", {.accumulates = true}));
//   teacher->Forward({x});
//   KD_ASSIGN_OR_RETURN(kd::IoDict io, manager.PopIoDict());
//   c10::IValue layer2_out = io["layer2"]["output"];   // a list: one entry per call
//
// Hooks added with AddHook live until Clear() or the manager's destruction; AddScopedHook
// returns a handle that removes its hook. Not thread-safe: one manager per model and thread.
#ifndef LIBKD_HOOKS_FORWARD_HOOK_MANAGER_H_
#define LIBKD_HOOKS_FORWARD_HOOK_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hooks/io_dict.h"
#include "hooks/model.h"

namespace torch {
namespace nn {
class Module;
}  // namespace nn
}  // namespace torch

namespace kd {

// What a hook records (torchdistill's forward-hook options).
struct HookOptions {
  // Record the module's positional input (a single argument unwrapped). Default true.
  bool requires_input = true;
  // Record the module's output. Default true.
  bool requires_output = true;
  // Keep every call's value, in call order, across calls and forwards until popped; without
  // it the last call wins. Default false.
  bool accumulates = false;
  // Pop the accumulated values as one tensor stacked on a new dim 0: (N, *value shape).
  // Requires `accumulates` and values of equal shape. Default false.
  bool stacks_accumulated = false;
};

class ForwardHookManager {
 public:
  // Owns one scoped hook: destroying the handle removes the hook and its I/O dict entry.
  // Safe to destroy after the manager (then it does nothing).
  class HookHandle {
   public:
    HookHandle() = default;
    HookHandle(HookHandle&& other) noexcept;
    HookHandle& operator=(HookHandle&& other) noexcept;
    ~HookHandle();
    void Reset();

   private:
    friend class ForwardHookManager;
    HookHandle(std::weak_ptr<ForwardHookManager*> manager, int64_t id)
        : manager_(std::move(manager)), id_(id) {}
    std::weak_ptr<ForwardHookManager*> manager_;
    int64_t id_ = -1;
  };

  explicit ForwardHookManager(c10::Device target_device = c10::Device(c10::kCPU));
  ~ForwardHookManager();
  ForwardHookManager(const ForwardHookManager&) = delete;
  ForwardHookManager& operator=(const ForwardHookManager&) = delete;

  // Records the module at `module_path` of `model` under io[module_path]. `model` must outlive
  // the hook (Clear() or the manager's destruction ends it). Errors: NotFound
  // (unknown path, with the nearest paths), InvalidArgument (options that contradict each
  // other, a path hooked twice), FailedPrecondition (a TorchScript module forward never calls).
  absl::Status AddHook(Model& model, absl::string_view module_path,
                       const HookOptions& options = {});
  // As AddHook, but the I/O dict key is `io_key` (for a module reached from another tree, or
  // two models in one dict: "teacher.fc").
  absl::Status AddHookToModule(Model& model, absl::string_view module_path, std::string io_key,
                               const HookOptions& options = {});
  // Hooks a native module instance directly (it must run through a hook point).
  absl::Status AddHookToModule(const torch::nn::Module& module, std::string io_key,
                               const HookOptions& options = {});
  // As AddHook; the returned handle removes the hook when destroyed.
  absl::StatusOr<HookHandle> AddScopedHook(Model& model, absl::string_view module_path,
                                           const HookOptions& options = {});

  // Returns what the hooks recorded, on the target device, and empties the dict (the hooks
  // stay). Values from several devices are concatenated on dim 0 (torchdistill's gather).
  // Errors: a stacked value with unequal shapes or a non-tensor (InvalidArgument naming the
  // path and shapes); a hooked native module that never ran through a hook point
  // (FailedPrecondition naming it and the rule).
  absl::StatusOr<IoDict> PopIoDict();
  // Returns and removes only the values recorded on `device`, not moved.
  absl::StatusOr<IoDict> PopIoDictFromDevice(c10::Device device);

  // Changes where PopIoDict gathers; a change of device type drops what was recorded.
  void ChangeTargetDevice(c10::Device device);
  c10::Device target_device() const { return target_device_; }

  // Drops what was recorded; the hooks stay.
  void ClearIoDict();
  // Removes every hook and everything recorded.
  void Clear();

  // The I/O dict keys of the current hooks, in the order they were added.
  std::vector<std::string> HookedKeys() const;

 private:
  struct Hook {
    int64_t id;
    std::string key;
    HookOptions options;
    TapHandle tap;                // model taps
    const Model* model = nullptr;
    int64_t native_hook = -1;     // hooks on raw native modules
    std::string module_type;      // for messages about raw native modules
  };
  // Per key, per io type, per device (str()): the values in call order (one if !accumulates).
  using DeviceValues = std::map<std::string, std::vector<c10::IValue>>;

  absl::Status CheckNewHook(const std::string& key, const HookOptions& options) const;
  std::unique_ptr<Hook> NewHook(const std::string& io_key, const HookOptions& options);
  // The callback that records a call under `io_key`.
  std::function<void(const std::vector<c10::IValue>&, const c10::IValue&)> Recorder(
      const std::string& io_key, const HookOptions& options);
  // Takes ownership of a hook whose tap or native hook is in place; returns its id.
  int64_t Keep(std::unique_ptr<Hook> hook);
  absl::StatusOr<int64_t> AddModelHook(Model& model, absl::string_view module_path,
                                       std::string io_key, const HookOptions& options);
  void Record(const std::string& key, const HookOptions& options,
              const std::vector<c10::IValue>& args, const c10::IValue& output);
  void RemoveHook(int64_t id);
  absl::Status CheckHooksFired() const;
  absl::StatusOr<c10::IValue> Finish(const std::string& key, const HookOptions& options,
                                     absl::string_view io_type,
                                     std::vector<c10::IValue> values) const;

  c10::Device target_device_;
  std::vector<std::unique_ptr<Hook>> hooks_;
  std::map<std::string, std::map<std::string, DeviceValues>> io_;
  int64_t next_id_ = 0;
  // Lets a HookHandle that outlives the manager do nothing.
  std::shared_ptr<ForwardHookManager*> alive_ = std::make_shared<ForwardHookManager*>(this);
};

}  // namespace kd

#endif  // LIBKD_HOOKS_FORWARD_HOOK_MANAGER_H_
