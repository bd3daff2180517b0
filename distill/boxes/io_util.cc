#include "distill/boxes/io_util.h"

#include "absl/strings/str_cat.h"

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
      return absl::Status(added.code(), absl::StrCat("forward_hooks[", i, "] (\"",
                                                     hook.module_path(), "\"): ",
                                                     added.message()));
    }
  }
  return absl::OkStatus();
}

void UpdateIoDict(IoDict& main, const IoDict& update) {
  for (const auto& [path, entry] : update) {
    IoEntry& target = main[path];
    for (const auto& [io_type, value] : entry) target[io_type] = value;
  }
}

}  // namespace kd
