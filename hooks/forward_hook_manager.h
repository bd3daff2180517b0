// ForwardHookManager: records module inputs and outputs by module path into an I/O dict, as
// torchdistill's ForwardHookManager does, for TorchScript and native models alike.
//
//   kd::ForwardHookManager manager(c10::kCPU);
//   KD_RETURN_IF_ERROR(manager.AddHook(*teacher, "layer2", {.accumulates = true}));
//   teacher->Forward({x});
//   KD_ASSIGN_OR_RETURN(kd::IoDict io, manager.PopIoDict());
//   KD_ASSIGN_OR_RETURN(c10::IValue layer2_out, kd::GetIo(io, "layer2", kOutput));
//   // a list, one entry per call (GetIo names a mistyped path; io["layer2"] would insert it)
//
// Hooks added with AddHook live until Clear() or the manager's destruction; AddScopedHook
// returns a kd::HookHandle that removes its hook. One manager may hook several models (a
// teacher and a student, under distinct keys) and pop after any of them ran; it is not
// thread-safe: use it from one thread. Recorded values keep the autograd graph (feature losses
// backpropagate through them) and are what the module took and returned, even where the rest
// of the forward writes them in place (HookOptions::values). Until popped, the manager keeps
// the recorded tensors alive (as torchdistill's dict does).
#ifndef LIBKD_HOOKS_FORWARD_HOOK_MANAGER_H_
#define LIBKD_HOOKS_FORWARD_HOOK_MANAGER_H_

#include <cstdint>
#include <functional>
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
  // The values as the module took and returned them (default), or torchdistill's references,
  // which a later in-place op of the forward changes (see kd::HookValues).
  HookValues values = HookValues::kAsReturned;
};

namespace hooks_internal {
struct RecordedOnDevice;
class WriteGuards;
}  // namespace hooks_internal

class ForwardHookManager {
 public:
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
  // As AddHook; the returned handle removes the hook and its I/O dict entry when reset or
  // destroyed (a no-op after the manager is gone).
  absl::StatusOr<HookHandle> AddScopedHook(Model& model, absl::string_view module_path,
                                           const HookOptions& options = {});

  // Returns what the hooks recorded, on the target device, and empties the dict (the hooks
  // stay). Values from several devices are concatenated on dim 0 (torchdistill's gather).
  // Errors: a stacked value with unequal shapes or a non-tensor (InvalidArgument naming the
  // path and shapes); a hooked native module that never ran through a hook point although its
  // model ran (FailedPrecondition naming it and the rule). A model that did not run since the
  // last pop is no error: its entries are simply empty.
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
  struct Hook;

  absl::Status CheckNewHook(const std::string& key, const HookOptions& options) const;
  // Adds `hook` once `attach` has put its recorder in place (the recorder writes into it).
  absl::StatusOr<Hook*> Keep(std::unique_ptr<Hook> hook,
                             const std::function<absl::StatusOr<HookHandle>(HookFn)>& attach);
  // The values `hook` asks its model for: references kept as returned by write guards where
  // it wants values as returned from a model that does not know its later writes.
  HookValues GuardWrites(Hook& hook, bool knows_later_writes);
  absl::StatusOr<Hook*> AddModelHook(Model& model, absl::string_view module_path,
                                     std::string io_key, const HookOptions& options);
  void RemoveHook(const Hook* hook);
  absl::Status CheckHooksFired();
  // PopIoDict's common case for one io type (`slot` 0: input, 1: output) of a hook: the values
  // `recorded` on one device, the last call's moved into `out` as returned (resolved with
  // `write_guards` where non-null).
  void TakeLast(std::vector<hooks_internal::RecordedOnDevice>& recorded,
                hooks_internal::WriteGuards* write_guards, IoEntry& out, int slot) const;
  // PopIoDict for the values of `hook`'s input (`slot` 0) or output (1) beyond the common case
  // (on several devices, or accumulated): into `out`.
  absl::Status PopCalls(Hook& hook, int slot, IoEntry& out);
  // hooks_ in key order (the I/O dict's order), and models_, rebuilt when hooks change.
  const std::vector<Hook*>& SortedHooks();

  c10::Device target_device_;
  std::vector<std::unique_ptr<Hook>> hooks_;
  std::vector<Hook*> sorted_hooks_;
  std::vector<const Model*> models_;  // the distinct models hooked (null: raw native modules)
  // Keep HookValues::kAsReturned values of native models as returned (one share per storage).
  std::unique_ptr<hooks_internal::WriteGuards> write_guards_;
  // Lets a HookHandle that outlives the manager do nothing.
  std::shared_ptr<ForwardHookManager*> alive_ = std::make_shared<ForwardHookManager*>(this);
};

}  // namespace kd

#endif  // LIBKD_HOOKS_FORWARD_HOOK_MANAGER_H_
