// Internal to hooks: how a native sub-model runs one module on its own (native_model.h's
// RegisterNativeModuleForward, torch::nn's common layers, Sequential containers).
#ifndef LIBKD_HOOKS_INTERNAL_NATIVE_MODULE_FORWARDS_H_
#define LIBKD_HOOKS_INTERNAL_NATIVE_MODULE_FORWARDS_H_

#include <memory>
#include <optional>

#include <torch/nn/module.h>

#include "hooks/native_model.h"

namespace kd {
namespace hooks_internal {

// The forward of `module` alone (its parent module: `parent`, null for none): by its type's
// registered forward, as a Sequential, or through the Sequential that holds it. nullopt when
// none of these knows how.
std::optional<NativeForwardFn> ModuleForward(const std::shared_ptr<torch::nn::Module>& module,
                                             const torch::nn::Module* parent);

}  // namespace hooks_internal
}  // namespace kd

#endif  // LIBKD_HOOKS_INTERNAL_NATIVE_MODULE_FORWARDS_H_
