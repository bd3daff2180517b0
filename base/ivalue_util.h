// Helpers for values as libtorch passes them around (c10::IValue): keyword arguments, moving
// and detaching every tensor inside a value, shapes as messages print them.
//
//   kd::Kwargs kwargs = {{"scale", 2.0}};
//   c10::IValue on_gpu = kd::ToDevice(output, c10::Device("cuda:0"));
//   std::string shape = kd::ShapeString(t);  // "[2, 8, 28, 28]"
#ifndef LIBKD_BASE_IVALUE_UTIL_H_
#define LIBKD_BASE_IVALUE_UTIL_H_

#include <optional>
#include <string>
#include <unordered_map>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

namespace kd {

// Keyword arguments of a forward or a plugin, as in torch::jit::Kwargs.
using Kwargs = std::unordered_map<std::string, c10::IValue>;

// `defaults` with `overrides` on top (a config's kwargs over a call's, a group's over the
// optimizer's).
Kwargs MergeKwargs(const Kwargs& defaults, const Kwargs& overrides);

// The kwargs a plugin's KwargsCheck (base/registry.h) sees.
struct KwargsView {
  const Kwargs& kwargs;
};

// `value` with every tensor in it (tuples, lists, dicts too) moved to `device`.
c10::IValue ToDevice(const c10::IValue& value, c10::Device device);

// `value` with every tensor in it detached from the autograd graph (sharing memory).
// `value` with every tensor cloned (a real copy; autograd records it, so gradients flow back).
c10::IValue CloneValue(const c10::IValue& value);
// `value` with every tensor lazily cloned (copy-on-write: the copy shares memory until either
// side is written; autograd records it); tensors whose storage has another write hook (a
// write guard, hooks/internal/write_guard.h) are cloned at once; undefined ones stay as they are.
c10::IValue LazyCloneValue(const c10::IValue& value);

c10::IValue DetachValue(const c10::IValue& value);

// "[2, 8, 28, 28]": a tensor's shape as messages show it.
std::string ShapeString(const at::Tensor& tensor);

// The device of the first tensor in `value`, or nullopt if it holds none.
std::optional<c10::Device> FirstTensorDevice(const c10::IValue& value);

}  // namespace kd

#endif  // LIBKD_BASE_IVALUE_UTIL_H_
