// Helpers for values as libtorch passes them around (c10::IValue): moving, detaching and
// cloning every tensor inside a value, shapes as messages print them. (Keyword arguments:
// base/kwargs.h.)
//
//   c10::IValue on_gpu = kd::ToDevice(output, c10::Device("cuda:0"));
//   std::string shape = kd::ShapeString(t);  // "[2, 8, 28, 28]"
#ifndef LIBKD_BASE_IVALUE_UTIL_H_
#define LIBKD_BASE_IVALUE_UTIL_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

namespace kd {

// `value` with `fn` (at::Tensor(const at::Tensor&)) applied to every tensor in it: tuples,
// lists and dicts are rebuilt around the results; other values are returned as they are.
// A template, not a std::function, as hooked calls copy their values through it.
template <typename Fn>
c10::IValue MapTensors(const c10::IValue& value, const Fn& fn) {
  if (value.isTensor()) return fn(value.toTensor());
  if (value.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const c10::IValue& e : value.toTupleRef().elements()) {
      elements.push_back(MapTensors(e, fn));
    }
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  if (value.isList()) {
    c10::impl::GenericList list(value.toList().elementType());
    for (const c10::IValue& e : value.toListRef()) list.push_back(MapTensors(e, fn));
    return list;
  }
  if (value.isGenericDict()) {
    const auto& dict = value.toGenericDict();
    c10::impl::GenericDict out(dict.keyType(), dict.valueType());
    for (const auto& entry : dict) out.insert(entry.key(), MapTensors(entry.value(), fn));
    return out;
  }
  return value;
}

// `value` with every tensor in it (tuples, lists, dicts too) moved to `device`.
c10::IValue ToDevice(const c10::IValue& value, c10::Device device);

// `value` with every tensor cloned (a real copy; autograd records it, so gradients flow back).
c10::IValue CloneValue(const c10::IValue& value);

// `value` with every tensor in it detached from the autograd graph (sharing memory).
c10::IValue DetachValue(const c10::IValue& value);

// "[2, 8, 28, 28]": a tensor's shape as messages show it.
std::string ShapeString(const at::Tensor& tensor);

// The device of the first tensor in `value`, or nullopt if it holds none.
std::optional<c10::Device> FirstTensorDevice(const c10::IValue& value);

}  // namespace kd

#endif  // LIBKD_BASE_IVALUE_UTIL_H_
