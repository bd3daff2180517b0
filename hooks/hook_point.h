// Hook points for native torch::nn::Modules.
//
// libtorch has no forward hooks and Module::forward is not virtual, so a parent's call of a
// child can only be intercepted if it goes through something libkd controls. The one rule:
// call children through kd::Call (or keep them in a kd::HookedSequential), never through
// `child->forward(...)` directly. A hook on a module that never ran through a hook point is
// reported by the hook's owner (ForwardHookManager, Model::CheckHooksFired) as an error.
//
//   struct NetImpl : torch::nn::Module {
//     NetImpl()
//         : conv(register_module("conv", torch::nn::Conv2d(1, 8, 3))),
//           head(register_module("head", kd::HookedSequential(torch::nn::Flatten(),
//                                                             torch::nn::Linear(8 * 26 * 26, 10))))
//                                                             {}
//     torch::Tensor forward(torch::Tensor x) {
//       x = kd::Call(conv, x);     // not conv->forward(x): hooks on "conv" fire
//       return kd::Call(head, x);  // hooks on "head", "head.0" and "head.1" fire
//     }
//     torch::nn::Conv2d conv;
//     kd::HookedSequential head;
//   };
//   TORCH_MODULE(Net);
//
// (hooks/examples_test.cc builds this example and checks that every hook fires.)
//
// With no hooks registered anywhere, kd::Call costs one relaxed atomic load.
#ifndef LIBKD_HOOKS_HOOK_POINT_H_
#define LIBKD_HOOKS_HOOK_POINT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>

#include "hooks/hook.h"
#include "hooks/internal/pooled_args.h"

namespace kd {

// Registers `fn` on the module instance `module`: it runs after each call of that instance
// through a hook point (an argument or output with no IValue form is passed as None). With
// HookValues::kAsReturned it receives lazy copies (copy-on-write: memory is copied only if the
// rest of the forward writes a tensor in place); with kReferences the module's own tensors.
// The handle removes it. Thread-safe.
HookHandle AddNativeHook(const torch::nn::Module& module, HookFn fn,
                         HookValues values = HookValues::kAsReturned);

namespace hooks_internal {

extern std::atomic<int64_t> num_hooks;

// The hooks of one module as they were at one moment: a call runs the list it looked up,
// whatever hooks are added or removed meanwhile.
struct HookList {
  std::vector<std::shared_ptr<const HookFn>> fns;
};

// The hooks registered on `module` now; null if none.
std::shared_ptr<const HookList> HooksOf(const torch::nn::Module* module);
// Calls `hooks` in order with one call's values.
inline void RunHooks(const HookList& hooks, const std::vector<c10::IValue>& args,
                     const c10::IValue& output) {
  for (const std::shared_ptr<const HookFn>& fn : hooks.fns) (*fn)(args, output);
}

template <typename T>
c10::IValue ToIValue(const T& value) {
  if constexpr (std::is_constructible_v<c10::IValue, const T&>) {
    return c10::IValue(value);
  } else {
    return c10::IValue();
  }
}

inline c10::IValue AnyToIValue(const torch::nn::AnyValue& value) {
  // AnyValue::try_get is not const-qualified; this only reads.
  if (const auto* t = const_cast<torch::nn::AnyValue&>(value).try_get<at::Tensor>()) {
    return c10::IValue(*t);
  }
  return c10::IValue();
}

}  // namespace hooks_internal

// Calls `module`'s forward with `args` and runs the hooks registered on that instance.
// `module` is a module holder (torch::nn::Linear), a std::shared_ptr<Impl> or an Impl*
// (e.g. `list[i]->as<torch::nn::Linear>()` for a ModuleList element).
template <typename M, typename... Args>
decltype(auto) Call(M&& module, Args&&... args) {
  auto& impl = *module;
  std::shared_ptr<const hooks_internal::HookList> hooks;
  if (hooks_internal::num_hooks.load(std::memory_order_relaxed) == 0 ||
      !(hooks = hooks_internal::HooksOf(&impl))) {
    return impl.forward(std::forward<Args>(args)...);
  }
  hooks_internal::PooledArgs in;
  (in->push_back(hooks_internal::ToIValue(args)), ...);
  auto out = impl.forward(std::forward<Args>(args)...);
  // `out` outlives its hooks: they get a borrow of a tensor output.
  hooks_internal::RunHooks(*hooks, *in, *hooks_internal::OutputValue<decltype(out)>(out));
  return out;
}

// A torch::nn::Sequential whose forward runs each child through a hook point.
// (clone() returns a plain Sequential, whose children run without hooks.)
class HookedSequentialImpl : public torch::nn::SequentialImpl {
 public:
  using torch::nn::SequentialImpl::SequentialImpl;

  template <typename ReturnType = at::Tensor, typename... InputTypes>
  ReturnType forward(InputTypes&&... inputs) {
    TORCH_CHECK(!is_empty(), "Cannot call forward() on an empty HookedSequential");
    auto it = begin();
    torch::nn::AnyValue value = CallChild(*it, std::forward<InputTypes>(inputs)...);
    for (++it; it != end(); ++it) value = CallChild(*it, std::move(value));
    // Every path returns (no -Wreturn-type in consumers' builds): the check throws.
    ReturnType* result = value.try_get<ReturnType>();
    TORCH_CHECK(result != nullptr, "The type of the return value is ",
                c10::demangle(value.type_info().name()), ", but you asked for type ",
                c10::demangle(typeid(ReturnType).name()));
    return std::move(*result);
  }

 private:
  template <typename... InputTypes>
  static torch::nn::AnyValue CallChild(torch::nn::AnyModule& child, InputTypes&&... inputs) {
    std::shared_ptr<const hooks_internal::HookList> hooks;
    if (hooks_internal::num_hooks.load(std::memory_order_relaxed) == 0 ||
        !(hooks = hooks_internal::HooksOf(child.ptr().get()))) {
      return child.any_forward(std::forward<InputTypes>(inputs)...);
    }
    hooks_internal::PooledArgs in;
    (in->push_back(ArgToIValue(inputs)), ...);
    torch::nn::AnyValue out = child.any_forward(std::forward<InputTypes>(inputs)...);
    // `out` outlives its hooks: they get a borrow of a tensor output.
    if (const auto* t = out.try_get<at::Tensor>()) {
      hooks_internal::RunHooks(*hooks, *in, *hooks_internal::OutputValue<at::Tensor>(*t));
    } else {
      hooks_internal::RunHooks(*hooks, *in, c10::IValue());
    }
    return out;
  }

  template <typename T>
  static c10::IValue ArgToIValue(const T& value) {
    if constexpr (std::is_same_v<std::decay_t<T>, torch::nn::AnyValue>) {
      return hooks_internal::AnyToIValue(value);
    } else {
      return hooks_internal::ToIValue(value);
    }
  }
};
TORCH_MODULE(HookedSequential);

// A HookedSequential of Tensor -> Tensor modules whose forward is not a template, so it can be a
// child of another HookedSequential or HookedTensorSequential: torchvision's nested Sequentials
// (MobileNet's `features.1.conv.0.0`, EfficientNet's `features.2.0.block.1`) keep their paths.
class HookedTensorSequentialImpl : public HookedSequentialImpl {
 public:
  using HookedSequentialImpl::HookedSequentialImpl;

  at::Tensor forward(at::Tensor x) {
    return HookedSequentialImpl::forward<at::Tensor>(std::move(x));
  }
};
TORCH_MODULE(HookedTensorSequential);

}  // namespace kd

#endif  // LIBKD_HOOKS_HOOK_POINT_H_
