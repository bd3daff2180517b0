#include "distill/boxes/io_util.h"

#include "absl/strings/str_cat.h"
#include "base/ivalue_util.h"
#include "base/status_macros.h"

namespace kd {

absl::Status SetHooks(ForwardHookManager& hooks, Model& model, const StageModelConfig& config) {
  for (int i = 0; i < config.forward_hooks_size(); ++i) {
    const ForwardHookConfig& hook = config.forward_hooks(i);
    HookOptions options;
    options.requires_input = hook.requires_input();
    options.requires_output = hook.requires_output();
    options.accumulates = hook.accumulates();
    options.stacks_accumulated = hook.stacks_accumulated();
    if (absl::Status added = hooks.AddHook(model, hook.module_path(), options); !added.ok()) {
      return WithContext(absl::StrCat("forward_hooks[", i, "] (\"", hook.module_path(), "\")"),
                         added);
    }
  }
  return absl::OkStatus();
}

absl::Status WrapModel(Model& model, const StageModelConfig&, c10::Device device, bool) {
  model.To(device);
  return absl::OkStatus();
}

absl::StatusOr<IoDict> ExtractIoDict(ForwardHookManager& hooks, c10::Device target) {
  absl::StatusOr<IoDict> io = hooks.PopIoDict();
  if (!io.ok()) return io.status();
  for (auto& [path, entry] : *io) {
    for (const char* io_type : {kInput, kOutput}) {
      if (entry.count(io_type)) entry[io_type] = ToDevice(entry.at(io_type), target);
    }
  }
  return io;
}

void UpdateIoDict(IoDict& main, const IoDict& update) {
  for (const auto& [path, entry] : update) {
    IoEntry& target = main[path];
    for (const auto& [io_type, value] : entry) target[io_type] = value;
  }
}

}  // namespace kd
