#include "base/ivalue_util.h"

#include <vector>

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/ops/_lazy_clone.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kd {

namespace {

// `value` with `fn` applied to every tensor in it (tuples, lists, dicts rebuilt).
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

}  // namespace

c10::IValue ToDevice(const c10::IValue& value, c10::Device device) {
  return MapTensors(value, [device](const at::Tensor& t) {
    return t.device() == device ? t : t.to(device);
  });
}

c10::IValue CloneValue(const c10::IValue& value) {
  return MapTensors(value, [](const at::Tensor& t) { return t.clone(); });
}

c10::IValue LazyCloneValue(const c10::IValue& value) {
  return MapTensors(value, [](const at::Tensor& t) { return at::_lazy_clone(t); });
}

c10::IValue DetachValue(const c10::IValue& value) {
  return MapTensors(value, [](const at::Tensor& t) { return t.detach(); });
}

std::string ShapeString(const at::Tensor& tensor) {
  return absl::StrCat("[", absl::StrJoin(tensor.sizes(), ", "), "]");
}

std::optional<c10::Device> FirstTensorDevice(const c10::IValue& value) {
  if (value.isTensor()) return value.toTensor().device();
  auto first = [](const auto& elements) -> std::optional<c10::Device> {
    for (const c10::IValue& e : elements) {
      if (auto d = FirstTensorDevice(e)) return d;
    }
    return std::nullopt;
  };
  if (value.isTuple()) return first(value.toTupleRef().elements());
  if (value.isList()) return first(value.toListRef());
  if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) {
      if (auto d = FirstTensorDevice(entry.value())) return d;
    }
  }
  return std::nullopt;
}

}  // namespace kd
