// torchdistill.core.util's I/O-dict helpers in C++ form, for code that drives
// models and hooks itself (a custom loop, a process function). The boxes use
// them too.
//
//   set_hooks               kd::SetHooks(hooks, model, stage.student())
//   wrap_model              kd::WrapModel(model, stage.student(), device, distributed)
//   extract_io_dict         kd::ExtractIoDict(hooks, device)
//   update_io_dict          kd::UpdateIoDict(main, more)
//   clear_io_dict           hooks.ClearIoDict()  (the recorded values go, the hooks stay)
//   add_kwargs_to_io_dict   io[path]  (an empty entry; torchdistill calls it without kwargs,
//                           and an IoEntry holds "input" and "output" only)
// and torchdistill.core.forward_hook's module-level helpers:
//   get_device_index                 kd::FirstTensorDevice(value) (base/ivalue_util.h)
//   register_forward_hook_with_dict  hooks.AddHook(model, path, {.requires_input = ...})
//   clear_io_dict_values             hooks.ClearIoDict()
#ifndef LIBKD_DISTILL_BOXES_IO_UTIL_H_
#define LIBKD_DISTILL_BOXES_IO_UTIL_H_

#include <c10/core/Device.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "distill/config/distill_config.pb.h"
#include "hooks/forward_hook_manager.h"
#include "hooks/io_dict.h"
#include "hooks/model.h"

namespace kd {

// Hooks every forward_hooks entry of `config` on `model` (both requires_input and
// requires_output copied as written: proto3 defaults them to false, HookOptions to true).
// Errors name the module path (with the nearest existing ones) and the entry.
absl::Status SetHooks(ForwardHookManager& hooks, Model& model, const StageModelConfig& config);

// Moves `model` to `device`. The wrapper of `config` is the box's stage's to apply:
// DISTRIBUTED_DATA_PARALLEL takes effect in a distributed run only, on a model that trains (as
// torchdistill's wrap_model), where the stage keeps the wrapped models' gradients (and those of
// the auxiliary modules and losses training beside them) in sync with kd::DataParallel
// (distill/boxes/distributed/ddp.h): Gloo on the CPU (torchdistill wraps on CUDA only), NCCL on
// CUDA.
absl::Status WrapModel(Model& model, const StageModelConfig& config, c10::Device device,
                       bool distributed);

// What `hooks` recorded since the last pop, each value moved to `target`
// (torchdistill's extract_io_dict); the manager's recorded values are gone
// after it.
absl::StatusOr<IoDict> ExtractIoDict(ForwardHookManager& hooks, c10::Device target);

// Copies every value of `update` into `main`, replacing what `main` held for the same path and
// io type (torchdistill's update_io_dict).
void UpdateIoDict(IoDict& main, const IoDict& update);

}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_IO_UTIL_H_
