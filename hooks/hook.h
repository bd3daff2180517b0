// The hook vocabulary shared by every model kind: the function a forward hook runs, the handle
// that removes it, and the one wording of "this hook never ran".
//
//   KD_ASSIGN_OR_RETURN(kd::HookHandle handle,
//                       model.AddHook("layer2", [](const std::vector<c10::IValue>& args,
//                                                  const c10::IValue& output) { ... }));
//   ...                 // the hook runs after each call of "layer2"
//   handle.Reset();     // or let the handle go out of scope
//
// The same HookFn and HookHandle serve TorchScript models, native models (Model::AddHook),
// native module instances (kd::AddNativeHook in hooks/hook_point.h) and ForwardHookManager's
// scoped hooks. No public header hands out raw hook ids.
#ifndef LIBKD_HOOKS_HOOK_H_
#define LIBKD_HOOKS_HOOK_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace c10 {
struct IValue;
}  // namespace c10

namespace kd {

// What a hook sees of a call's values.
enum class HookValues {
  // The values as the module took and returned them, whatever the rest of the forward does
  // (default): a value the forward later writes in place (an in-place ReLU after a BatchNorm,
  // `out += identity`) reaches the hook as a copy, everything else as the model's own tensor.
  // TorchScript copies exactly where its graph writes later; native models hand over lazy
  // copies (copy-on-write: memory is copied only if the forward writes the tensor), one shared
  // by a module's output and the next hooked module's input while it is unchanged.
  // ForwardHookManager, which hands values over only when popped, does it more cheaply on
  // native models: it records the model's own tensors and arms their storages' write hooks
  // (hooks/internal/write_guard.h), so a popped value is the model's own tensor unless the
  // forward wrote it, and a copy made just before the write otherwise.
  kAsReturned,
  // The model's own tensors, as torchdistill records them: a later in-place op changes them.
  kReferences,
};

// Called after each forward call of a hooked module with its positional arguments and its
// output. The values keep the autograd graph (copies too); see HookValues for what a later
// in-place op of the forward does to them.
using HookFn = std::function<void(const std::vector<c10::IValue>& args, const c10::IValue& output)>;

// Owns one hook: destroying it or calling Reset() removes the hook. Movable, not copyable.
// Safe to destroy after whatever it hooked: removal is then a no-op.
class HookHandle {
 public:
  HookHandle() = default;
  // `remove` runs once, when the handle is reset or destroyed.
  explicit HookHandle(std::function<void()> remove) : remove_(std::move(remove)) {}
  HookHandle(HookHandle&& other) noexcept : remove_(std::exchange(other.remove_, nullptr)) {}
  HookHandle& operator=(HookHandle&& other) noexcept {
    if (this != &other) {
      Reset();
      remove_ = std::exchange(other.remove_, nullptr);
    }
    return *this;
  }
  HookHandle(const HookHandle&) = delete;
  HookHandle& operator=(const HookHandle&) = delete;
  ~HookHandle() { Reset(); }

  // Removes the hook now (no-op if already removed).
  void Reset() {
    if (remove_) std::exchange(remove_, nullptr)();
  }
  // Whether the handle still owns a hook.
  bool active() const { return remove_ != nullptr; }

 private:
  std::function<void()> remove_;
};

// The error for hooks on native modules that ran no call through a hook point although their
// model ran: FailedPrecondition naming `modules` (each described as "\"conv\" (Conv2d)") and the
// rule of hooks/hook_point.h.
absl::Status NeverRanThroughHookPointError(const std::vector<std::string>& modules);

}  // namespace kd

#endif  // LIBKD_HOOKS_HOOK_H_
