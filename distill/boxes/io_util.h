// torchdistill.core.util's I/O-dict helpers in C++ form, for code that drives models and hooks
// itself (a custom loop, a process function):
//
//   set_hooks        kd::SetHooks(hooks, model, stage.student())   (the box uses it too)
//   update_io_dict   kd::UpdateIoDict(main, more)
//   extract_io_dict  hooks.PopIoDict() on a manager made for the target device
//                    (ForwardHookManager(device) / ChangeTargetDevice)
//   clear_io_dict    hooks.ClearIoDict()
// (forward_hook's get_device_index / register_forward_hook_with_dict are the manager's own
// device handling and AddHook; wrap_model is the multi-process issue's.)
#ifndef LIBKD_DISTILL_BOXES_IO_UTIL_H_
#define LIBKD_DISTILL_BOXES_IO_UTIL_H_

#include "absl/status/status.h"
#include "distill/config/distill_config.pb.h"
#include "hooks/forward_hook_manager.h"
#include "hooks/io_dict.h"
#include "hooks/model.h"

namespace kd {

// Hooks every forward_hooks entry of `config` on `model` (both requires_input and
// requires_output copied as written: proto3 defaults them to false, HookOptions to true).
// Errors name the module path (with the nearest existing ones) and the entry.
absl::Status SetHooks(ForwardHookManager& hooks, Model& model, const StageModelConfig& config);

// Copies every value of `update` into `main`, replacing what `main` held for the same path and
// io type (torchdistill's update_io_dict).
void UpdateIoDict(IoDict& main, const IoDict& update);

}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_IO_UTIL_H_
