#include "hooks/io_dict.h"

#include <vector>

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/nearest.h"

namespace kd {

absl::StatusOr<c10::IValue> GetIo(const IoDict& io, absl::string_view path,
                                  absl::string_view io_type) {
  auto it = io.find(std::string(path));
  if (it == io.end()) {
    std::vector<std::string> paths;
    for (const auto& [p, entry] : io) paths.push_back(p);
    return absl::NotFoundError(absl::StrCat("no I/O recorded for module ", QuoteName(path),
                                            "; ", FormatNearest(path, paths)));
  }
  auto value = it->second.find(std::string(io_type));
  if (value == it->second.end()) {
    std::vector<std::string> types;
    for (const auto& [t, v] : it->second) types.push_back(t);
    return absl::NotFoundError(absl::StrCat(
        "no \"", io_type, "\" recorded for module ", QuoteName(path), " (recorded: ",
        types.empty() ? "nothing; did a forward run since the last pop?"
                      : absl::StrJoin(types, ", "),
        ")"));
  }
  return value->second;
}

c10::IValue IoDictToIValue(const IoDict& io) {
  c10::impl::GenericDict outer(c10::StringType::get(), c10::AnyType::get());
  for (const auto& [path, entry] : io) {
    c10::impl::GenericDict inner(c10::StringType::get(), c10::AnyType::get());
    for (const auto& [io_type, value] : entry) inner.insert(io_type, value);
    outer.insert(path, inner);
  }
  return outer;
}

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

c10::IValue DetachValue(const c10::IValue& value) {
  return MapTensors(value, [](const at::Tensor& t) { return t.detach(); });
}

std::string ShapeString(const at::Tensor& tensor) {
  return absl::StrCat("[", absl::StrJoin(tensor.sizes(), ", "), "]");
}

c10::optional<c10::Device> FirstTensorDevice(const c10::IValue& value) {
  if (value.isTensor()) return value.toTensor().device();
  auto first = [](const auto& elements) -> c10::optional<c10::Device> {
    for (const c10::IValue& e : elements) {
      if (auto d = FirstTensorDevice(e)) return d;
    }
    return c10::nullopt;
  };
  if (value.isTuple()) return first(value.toTupleRef().elements());
  if (value.isList()) return first(value.toListRef());
  if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) {
      if (auto d = FirstTensorDevice(entry.value())) return d;
    }
  }
  return c10::nullopt;
}

}  // namespace kd
