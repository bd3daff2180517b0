#include "base/ivalue_util.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kd {

c10::IValue ToDevice(const c10::IValue& value, c10::Device device) {
  return MapTensors(
      value, [device](const at::Tensor& t) { return t.device() == device ? t : t.to(device); });
}

c10::IValue CloneValue(const c10::IValue& value) {
  return MapTensors(value, [](const at::Tensor& t) { return t.clone(); });
}

c10::IValue DetachValue(const c10::IValue& value) {
  return MapTensors(value, [](const at::Tensor& t) { return t.defined() ? t.detach() : t; });
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
