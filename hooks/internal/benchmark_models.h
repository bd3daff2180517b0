// The models //hooks:forward_hook_manager_benchmark times and the loops that time them: a
// chain of kHookedCalls modules that each add 1 to their input, as TorchScript and as a native
// model, where a forward costs next to nothing and what hooks add is what is measured.
//
//   std::shared_ptr<kd::Model> chain = kd::hooks_internal::NativeChain();
//   kd::ForwardHookManager manager;
//   kd::hooks_internal::HookChain(*chain, manager, kd::HookValues::kAsReturned);
//   kd::hooks_internal::ChainForwards(*chain, manager, at::zeros({1}), /*forwards=*/2200);
//
// Failures (a hook that cannot be added, a pop that fails) exit 2: a benchmark has no one to
// return a status to.
#ifndef LIBKD_HOOKS_INTERNAL_BENCHMARK_MODELS_H_
#define LIBKD_HOOKS_INTERNAL_BENCHMARK_MODELS_H_

#include <memory>

#include <ATen/core/Tensor.h>

#include "hooks/forward_hook_manager.h"
#include "hooks/model.h"

namespace kd {
namespace hooks_internal {

// The chain's length: the modules hooked, each called once per forward.
inline constexpr int kHookedCalls = 5;

// root.forward calls m0 ... m4, each `x + 1`, as TorchScript; in eval mode.
std::shared_ptr<Model> TorchScriptChain();
// The same chain as a native model, its modules called through hook points; in eval mode.
std::shared_ptr<Model> NativeChain();

// Hooks m0 ... m4 of a chain with `values`.
void HookChain(Model& chain, ForwardHookManager& manager, HookValues values);

// `forwards` forwards of `model` on `input`, each popped from `manager` if it has hooks; without
// autograd, or with `grad` on an input that requires grad (autograd records the graph). Not
// inlined: callgrind's --toggle-collect='*ChainForwards*' counts it alone.
[[gnu::noinline]] void ChainForwards(Model& model, ForwardHookManager& manager,
                                     const at::Tensor& input, int forwards, bool grad = false);

// Thread CPU time of `forwards` forwards of `model` (each popped from `manager` if it has
// hooks), per forward; with `grad`, on an input that requires grad (autograd records the graph).
double SecondsPerForward(Model& model, ForwardHookManager& manager, const at::Tensor& input,
                         bool grad, int forwards);

}  // namespace hooks_internal
}  // namespace kd

#endif  // LIBKD_HOOKS_INTERNAL_BENCHMARK_MODELS_H_
