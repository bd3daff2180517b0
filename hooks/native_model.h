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

namespace native_model_internal {

template <typename F>
struct ForwardTraits;
template <typename C, typename R, typename... A>
struct ForwardTraits<R (C::*)(A...)> {
  using Args = std::tuple<std::decay_t<A>...>;
};
template <typename C, typename R, typename... A>
struct ForwardTraits<R (C::*)(A...) const> : ForwardTraits<R (C::*)(A...)> {};

void CheckCall(const std::string& type, size_t expected_args, size_t actual_args,
               const Kwargs& kwargs);

template <typename Impl, typename Fn, typename Args, size_t... I>
c10::IValue Invoke(Impl& impl, Fn fn, std::vector<c10::IValue>& args,
                   std::index_sequence<I...>) {
  return c10::IValue((impl.*fn)(std::move(args[I]).to<std::tuple_element_t<I, Args>>()...));
}

}  // namespace native_model_internal

// Wraps `root`, calling its forward by its signature.
template <typename Impl>
std::unique_ptr<Model> MakeNativeModel(std::shared_ptr<Impl> root) {
  using Fn = decltype(&Impl::forward);
  using Args = typename native_model_internal::ForwardTraits<Fn>::Args;
  constexpr size_t kNumArgs = std::tuple_size_v<Args>;
  Impl* impl = root.get();
  NativeForwardFn forward = [impl](std::vector<c10::IValue>& args, const Kwargs& kwargs) {
    native_model_internal::CheckCall(NativeTypeName(*impl), kNumArgs, args.size(), kwargs);
    return native_model_internal::Invoke<Impl, Fn, Args>(*impl, &Impl::forward, args,
                                                         std::make_index_sequence<kNumArgs>());
  };
  return MakeNativeModel(std::static_pointer_cast<torch::nn::Module>(std::move(root)),
                         std::move(forward));
}

// The wrapped module of a native Model, or nullptr for other kinds.
std::shared_ptr<torch::nn::Module> GetNativeModule(const Model& model);

}  // namespace kd

#endif  // LIBKD_HOOKS_NATIVE_MODEL_H_
