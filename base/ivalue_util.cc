#include "base/ivalue_util.h"

#include <typeinfo>
#include <vector>

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/_lazy_clone.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/COW.h>

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

// at::_lazy_clone(t) (a copy-on-write copy: memory is copied only if one of
// them is written), built as its CPU kernel builds it, without the dispatcher's
// round trip, where the copy needs no autograd history and `t` is a plain dense
// tensor; at::_lazy_clone itself otherwise.
at::Tensor LazyCloneTensor(const at::Tensor& t) {
  if (!t.defined()) return t;  // nothing to copy (at::_lazy_clone refuses it)
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (impl != nullptr && impl->has_storage()) {
    const c10::StorageImpl& storage = *impl->storage().unsafeGetStorageImpl();
    if (storage.has_materializer() && !c10::impl::cow::is_cow_data_ptr(storage.data_ptr())) {
      // Another write hook (a libkd write guard, hooks/internal/write_guard.h): a storage
      // takes one at a time, and at::_lazy_clone would fail an assert.
      return t.clone();
    }
  }
  if (typeid(*impl) != typeid(c10::TensorImpl) || !impl->has_storage() || t.is_inference() ||
      c10::InferenceMode::is_enabled() || t.layout() != c10::kStrided ||
      (t.requires_grad() && at::GradMode::is_enabled())) {
    return at::_lazy_clone(t);
  }
  c10::intrusive_ptr<c10::StorageImpl> storage =
      c10::impl::cow::lazy_clone_storage(*impl->storage().unsafeGetStorageImpl());
  if (!storage) return at::_lazy_clone(t);  // says why
  auto copy = c10::make_intrusive<c10::TensorImpl>(c10::Storage(std::move(storage)),
                                                   impl->key_set(), impl->dtype());
  copy->set_sizes_and_strides(impl->sizes(), impl->strides(), impl->storage_offset());
  return at::Tensor(std::move(copy));
}

}  // namespace

c10::IValue ToDevice(const c10::IValue& value, c10::Device device) {
  return MapTensors(
      value, [device](const at::Tensor& t) { return t.device() == device ? t : t.to(device); });
}

c10::IValue CloneValue(const c10::IValue& value) {
  return MapTensors(value, [](const at::Tensor& t) { return t.clone(); });
}

c10::IValue LazyCloneValue(const c10::IValue& value) { return MapTensors(value, LazyCloneTensor); }

c10::IValue DetachValue(const c10::IValue& value) {
  return MapTensors(value, [](const at::Tensor& t) { return t.detach(); });
}

Kwargs MergeKwargs(const Kwargs& defaults, const Kwargs& overrides) {
  Kwargs merged = defaults;
  for (const auto& [name, value] : overrides) merged.insert_or_assign(name, value);
  return merged;
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
