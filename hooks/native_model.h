// Native torch::nn::Modules behind the kd::Model handle.
//
//   struct NetImpl : torch::nn::Module { torch::Tensor forward(torch::Tensor x); ... };
//   TORCH_MODULE(Net);
//   std::unique_ptr<kd::Model> model = kd::MakeNativeModel(Net().ptr());
//   model->Forward({torch::ones({1, 3})});
//
// MakeNativeModel deduces how to call forward from its signature when forward is a single
// non-template member function whose arguments and result convert to and from IValue
// (tensors, scalars, tuples, lists). Otherwise pass a NativeForwardFn. Taps on submodules
// fire only where the parent calls them through a hook point (hooks/hook_point.h).
#ifndef LIBKD_HOOKS_NATIVE_MODEL_H_
#define LIBKD_HOOKS_NATIVE_MODEL_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeindex>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

#include "hooks/model.h"

namespace kd {

// Runs a native model's forward on IValue args and kwargs.
using NativeForwardFn =
    std::function<c10::IValue(std::vector<c10::IValue>& args, const Kwargs& kwargs)>;

// Wraps `root` with an explicit forward.
std::unique_ptr<Model> MakeNativeModel(std::shared_ptr<torch::nn::Module> root,
                                       NativeForwardFn forward);

// "torch::nn::Conv2dImpl" -> "Conv2d", "my::NetImpl" -> "Net": the short type name Python
// would print for the same module.
std::string NativeTypeName(const torch::nn::Module& module);

namespace hooks_internal {

template <typename F>
struct ForwardTraits;
template <typename C, typename R, typename... A>
struct ForwardTraits<R (C::*)(A...)> {
  using Args = std::tuple<std::decay_t<A>...>;
};
template <typename C, typename R, typename... A>
struct ForwardTraits<R (C::*)(A...) const> : ForwardTraits<R (C::*)(A...)> {};

// Throws naming `type` where a call of its deduced forward does not fit (keyword arguments, or
// another number of arguments).
void CheckCall(const std::string& type, size_t expected_args, size_t actual_args,
               const Kwargs& kwargs);

template <typename Impl, typename Fn, typename Args, size_t... I>
c10::IValue Invoke(Impl& impl, Fn fn, std::vector<c10::IValue>& args, std::index_sequence<I...>) {
  return c10::IValue((impl.*fn)(std::move(args[I]).to<std::tuple_element_t<I, Args>>()...));
}

// `Impl`'s forward called by its signature on IValues.
template <typename Impl>
c10::IValue CallDeduced(Impl& impl, std::vector<c10::IValue>& args, const Kwargs& kwargs) {
  using Fn = decltype(&Impl::forward);
  using Args = typename ForwardTraits<Fn>::Args;
  constexpr size_t kNumArgs = std::tuple_size_v<Args>;
  // The type's name only for the error: a forward pays no string work.
  if (!kwargs.empty() || args.size() != kNumArgs) [[unlikely]] {
    CheckCall(NativeTypeName(impl), kNumArgs, args.size(), kwargs);
  }
  return Invoke<Impl, Fn, Args>(impl, &Impl::forward, args, std::make_index_sequence<kNumArgs>());
}

}  // namespace hooks_internal

// Wraps `root`, calling its forward by its signature.
template <typename Impl>
std::unique_ptr<Model> MakeNativeModel(std::shared_ptr<Impl> root) {
  Impl* impl = root.get();
  NativeForwardFn forward = [impl](std::vector<c10::IValue>& args, const Kwargs& kwargs) {
    return hooks_internal::CallDeduced(*impl, args, kwargs);
  };
  return MakeNativeModel(std::static_pointer_cast<torch::nn::Module>(std::move(root)),
                         std::move(forward));
}

// Runs a native module's own forward: how Model::Submodel runs a module of a native model on
// its own (torchdistill's trimmed `sequential` stage models).
using NativeModuleForwardFn = std::function<c10::IValue(
    torch::nn::Module& module, std::vector<c10::IValue>& args, const Kwargs& kwargs)>;

// Teaches native sub-models to run modules whose dynamic type is `type`. Known without it:
// torch::nn::Sequential and kd::HookedSequential, torch::nn's common layers (Linear, Conv1d-3d,
// BatchNorm1d-3d, LayerNorm, GroupNorm, Embedding, the activations, pooling, Flatten, Dropout,
// Identity), and any module kept in a torch::nn::Sequential (run through its AnyModule).
// Thread-safe; a later registration of the same type replaces the earlier one.
void RegisterNativeModuleForward(std::type_index type, NativeModuleForwardFn forward);

// The same for `Impl`, calling its forward by its signature (as MakeNativeModel does):
//   kd::RegisterNativeModuleForward<BasicBlockImpl>();
template <typename Impl>
void RegisterNativeModuleForward() {
  RegisterNativeModuleForward(
      std::type_index(typeid(Impl)),
      [](torch::nn::Module& module, std::vector<c10::IValue>& args, const Kwargs& kwargs) {
        return hooks_internal::CallDeduced(static_cast<Impl&>(module), args, kwargs);
      });
}

// The wrapped module of a native Model, or nullptr for other kinds.
std::shared_ptr<torch::nn::Module> GetNativeModule(const Model& model);

}  // namespace kd

#endif  // LIBKD_HOOKS_NATIVE_MODEL_H_
