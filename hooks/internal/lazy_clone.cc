#include "hooks/internal/lazy_clone.h"

#include <typeinfo>
#include <utility>

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/_lazy_clone.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/COW.h>

#include "base/ivalue_util.h"

namespace kd {
namespace {

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

c10::IValue LazyCloneValue(const c10::IValue& value) { return MapTensors(value, LazyCloneTensor); }

}  // namespace kd
