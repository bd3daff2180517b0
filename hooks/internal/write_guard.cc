#include "hooks/internal/write_guard.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <functional>
#include <optional>
#include <typeinfo>
#include <utility>

#include <ATen/core/grad_mode.h>
#include <c10/core/Allocator.h>
#include <c10/core/AutogradState.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/StorageMaterializer.h>
#include <torch/csrc/autograd/variable.h>

#include "hooks/internal/lazy_clone.h"
#include "hooks/internal/write_slots.h"

namespace kd {
namespace hooks_internal {
namespace {

bool SameLayout(const c10::TensorImpl& impl, const KeptTensor& kept) {
  return impl.storage_offset() == kept.storage_offset && impl.dtype() == kept.dtype &&
         impl.sizes().equals(kept.sizes()) && impl.strides().equals(kept.strides());
}

// At most this many slots stay with a recorder when its storages are disarmed.
constexpr size_t kMaxSpare = 64;

}  // namespace

WriteGuard::WriteGuard() = default;

WriteGuard::~WriteGuard() {
  if (slot >= 0) WriteGuards::Release(slot, own);
}

WriteGuard::WriteGuard(WriteGuard&& other) noexcept
    : slot(std::exchange(other.slot, -1)), own(other.own), kept(std::move(other.kept)) {}

WriteGuard& WriteGuard::operator=(WriteGuard&& other) noexcept {
  if (this != &other) {
    if (slot >= 0) WriteGuards::Release(slot, own);
    slot = std::exchange(other.slot, -1);
    own = other.own;
    kept = std::move(other.kept);
  }
  return *this;
}

WriteGuards::WriteGuards()
    : chunk_hint_(static_cast<int>(std::hash<const void*>()(this) % kChunks)) {
  spare_.reserve(kMaxSpare);  // Free, in a guard's destructor, must not allocate
}

WriteGuards::~WriteGuards() {
  for (int32_t index : spare_) ReturnSlot(index);
  // Guards that outlive their recorder free their slots into the process's.
  for (int32_t index = 0; live_slots_ > 0 && index < kSlots; ++index) {
    if (slots[index].owner == this) {
      slots[index].owner = nullptr;
      --live_slots_;
    }
  }
}

int64_t WriteGuards::CopiesMade() { return hooks_internal::CopiesMade(); }

inline void WriteGuards::Release(int32_t index, bool own) {
  Slot& slot = slots[index];
  if (!own && --slot.first_guards == 0) {
    slot.first.impl = nullptr;
    slot.first.grad_fn.reset();
  }
  if (--slot.guards == 0) Free(index);
}

[[gnu::noinline]] void WriteGuards::Free(int32_t index) {
  Slot& slot = slots[index];
  if (!slot.written.load(std::memory_order_acquire)) slot.storage->clear_materializer();
  slot.storage.reset();
  slot.copy.reset();
  WriteGuards* owner = std::exchange(slot.owner, nullptr);
  if (owner != nullptr) --owner->live_slots_;
  if (owner != nullptr && owner->spare_.size() < kMaxSpare) {
    owner->spare_.push_back(index);
  } else {
    ReturnSlot(index);
  }
}

bool WriteGuards::Share(int32_t index, const c10::StorageImpl& storage) const {
  Slot& slot = slots[index];
  if (slot.storage.get() != &storage || slot.owner != this ||
      slot.written.load(std::memory_order_acquire)) {
    return false;
  }
  ++slot.guards;
  return true;
}

[[gnu::always_inline]] inline int32_t WriteGuards::Arm(c10::StorageImpl& storage) {
  // The slot used last (the previous hooked module's output, say): no search.
  if (last_ >= 0 && Share(last_, storage)) [[likely]] {
    return last_;
  }
  return ArmAgain(storage);
}

inline int32_t WriteGuards::TakeSlot() {
  if (!spare_.empty()) {
    const int32_t index = spare_.back();
    spare_.pop_back();
    return index;
  }
  return AcquireSlot(chunk_hint_);
}

[[gnu::noinline]] int32_t WriteGuards::ArmAgain(c10::StorageImpl& storage) {
  if (storage.has_materializer()) {
    // This recorder's, kept again (a block's input after its first layer's)?
    for (int32_t index : armed_) {
      if (Share(index, storage)) return last_ = index;
    }
    return -1;  // another recorder's, or copy-on-write
  }
  const int32_t index = TakeSlot();
  if (index < 0) return -1;
  Slot& slot = slots[index];
  slot.storage = c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(&storage);
  slot.owner = this;
  ++live_slots_;
  slot.guards = 1;
  slot.written.store(false, std::memory_order_relaxed);
  storage.set_materializer(WriteHook(index));
  armed_.push_back(index);
  return last_ = index;
}

namespace {

// A plain dense tensor (an undefined tensor's impl is an UndefinedTensorImpl) with memory of
// its own from an allocator: its storage; else null.
inline c10::StorageImpl* GuardableStorage(c10::TensorImpl& impl) {
  if (typeid(impl) != typeid(c10::TensorImpl) || impl.layout() != c10::kStrided) return nullptr;
  c10::StorageImpl* storage = impl.unsafe_storage().unsafeGetStorageImpl();
  if (storage == nullptr || storage->allocator() == nullptr ||
      storage->data_ptr().get() == nullptr) {
    return nullptr;
  }
  return storage;
}

inline int64_t VersionOf(const c10::TensorImpl& impl) {
  const c10::VariableVersion& version = impl.version_counter();
  return version.enabled() ? int64_t{version.current_version()} : -1;
}

// Records `impl`'s metadata, `version` and history into `kept`.
[[gnu::always_inline]] inline void Snapshot(
    KeptTensor& kept, const c10::TensorImpl& impl, int64_t version,
    const c10::intrusive_ptr<torch::autograd::Node>& grad_fn, uint32_t output_nr, bool leaf) {
  kept.impl = &impl;
  const c10::IntArrayRef sizes = impl.sizes(), strides = impl.strides();
  const size_t dims = sizes.size();
  kept.dim = static_cast<int32_t>(dims);
  int64_t* layout = dims <= KeptTensor::kInlineDims
                        ? kept.layout_inline
                        : (kept.layout_heap = std::make_unique<int64_t[]>(2 * dims)).get();
  for (size_t i = 0; i < dims; ++i) {
    layout[i] = sizes[i];
    layout[dims + i] = strides[i];
  }
  kept.storage_offset = impl.storage_offset();
  kept.key_set = impl.key_set();
  kept.dtype = impl.dtype();
  // (is_inference is not const-qualified; it reads.)
  kept.inference = const_cast<c10::TensorImpl&>(impl).is_inference();
  kept.leaf = leaf;
  kept.version = version;
  kept.grad_fn = grad_fn;
  kept.output_nr = output_nr;
}

// Whether autograd records on this thread (c10::GradMode::is_enabled(), without its call into
// libc10 and libc10's thread-local lookup on every call: the state's address is found once per
// thread).
inline bool GradModeEnabled() {
  thread_local const c10::AutogradState* state = nullptr;
  if (state == nullptr) [[unlikely]] {
    state = &c10::AutogradState::get_tls_state();
  }
  return state->get_grad_mode();
}

const c10::intrusive_ptr<torch::autograd::Node> kNoHistory;

}  // namespace

[[gnu::always_inline]] inline bool WriteGuards::Guard(
    const c10::TensorImpl& impl, c10::StorageImpl& storage, WriteGuard& guard,
    const c10::intrusive_ptr<torch::autograd::Node>& grad_fn, uint32_t output_nr, bool leaf) {
  const int32_t index = Arm(storage);
  if (index < 0) [[unlikely]] {
    return false;
  }
  guard.slot = index;
  Slot& slot = slots[index];
  const int64_t version = VersionOf(impl);
  KeptTensor& first = slot.first;
  if (slot.first_guards == 0) {
    Snapshot(first, impl, version, grad_fn, output_nr, leaf);
    slot.first_guards = 1;
    guard.own = false;
  } else if (first.impl == &impl && version >= 0 && first.version == version &&
             first.grad_fn.get() == grad_fn.get() && first.output_nr == output_nr &&
             first.leaf == leaf) {
    // The same tensor, unchanged since (its version kept; the guards sharing `first` hold
    // it, so no other tensor has its address): its record serves.
    ++slot.first_guards;
    guard.own = false;
  } else {
    Snapshot(guard.kept, impl, version, grad_fn, output_nr, leaf);
    guard.own = true;
  }
  return true;
}

[[gnu::always_inline]] inline bool WriteGuards::KeepAgain(const c10::TensorImpl& impl,
                                                          WriteGuard& guard) {
  if (last_ < 0) return false;
  Slot& slot = slots[last_];
  const KeptTensor& first = slot.first;
  if (first.impl != &impl || slot.first_guards == 0 || slot.owner != this ||
      slot.storage.get() != impl.unsafe_storage().unsafeGetStorageImpl() ||
      slot.written.load(std::memory_order_acquire) || first.version < 0 ||
      VersionOf(impl) != first.version) {
    return false;
  }
  // The history it was kept with (in-place ops, which change it, bump the version; detach_
  // does not).
  const auto* meta = static_cast<const torch::autograd::AutogradMeta*>(impl.autograd_meta());
  if (first.grad_fn || first.leaf) {
    if (meta == nullptr || meta->is_view_ || meta->grad_fn_.get() != first.grad_fn.get() ||
        (first.leaf ? !meta->requires_grad_ : meta->output_nr_ != first.output_nr) ||
        !GradModeEnabled()) {
      return false;
    }
  } else if (meta != nullptr && (meta->requires_grad_ || meta->grad_fn_)) {
    return false;
  }
  ++slot.guards;
  ++slot.first_guards;
  guard.slot = last_;
  guard.own = false;
  return true;
}

void WriteGuards::Keep(c10::IValue& value, WriteGuard& guard) {
  // The tensor kept last, unchanged (a module's output that is the next module's input).
  if (value.isTensor() && KeepAgain(*value.unsafeToTensorImpl(), guard)) return;
  c10::TensorImpl* impl = value.isTensor() ? value.unsafeToTensorImpl() : nullptr;
  c10::StorageImpl* storage = impl != nullptr ? GuardableStorage(*impl) : nullptr;
  if (storage == nullptr) [[unlikely]] {
    value = LazyCloneValue(value);  // others get a copy now
    return;
  }
  // What impl->requires_grad() reads, without its two calls.
  const auto* meta = static_cast<const torch::autograd::AutogradMeta*>(impl->autograd_meta());
  if (meta != nullptr && (meta->requires_grad_ || meta->grad_fn_)) {
    KeepWithHistory(value, *impl, *meta, *storage, guard);
    return;
  }
  if (!Guard(*impl, *storage, guard, kNoHistory, 0, false)) [[unlikely]] {
    value = LazyCloneValue(value);
  }
}

[[gnu::always_inline]] inline void WriteGuards::KeepWithHistory(
    c10::IValue& value, c10::TensorImpl& impl, const torch::autograd::AutogradMeta& meta,
    c10::StorageImpl& storage, WriteGuard& guard) {
  // Without autograd a copy drops requires_grad: it stays with the copy.
  if (!GradModeEnabled()) [[unlikely]] {
    value = LazyCloneValue(value);
    return;
  }
  if (meta.is_view_) [[unlikely]] {
    // A view's grad_fn is what Tensor::grad_fn() says (it rebuilds it after an in-place write
    // through the base); a view that requires grad has one.
    const at::Tensor& t = value.toTensor();
    const c10::intrusive_ptr<torch::autograd::Node> grad_fn = t.grad_fn();
    if (!grad_fn || !Guard(impl, storage, guard, grad_fn, t.output_nr(), false)) {
      value = LazyCloneValue(value);
    }
    return;
  }
  // A leaf keeps no node: its history is its accumulator, found again if it must be rebuilt.
  const bool leaf = !meta.grad_fn_;
  if (!Guard(impl, storage, guard, meta.grad_fn_, leaf ? 0 : meta.output_nr_, leaf)) [[unlikely]] {
    value = LazyCloneValue(value);
  }
}

void WriteGuards::ResolveInPlace(c10::IValue& value, WriteGuard& guard) {
  const int32_t index = guard.slot;
  if (index < 0) return;
  const Slot& slot = slots[index];
  const KeptTensor& kept = guard.own ? guard.kept : slot.first;
  const bool written = slot.written.load(std::memory_order_acquire);
  // Keep guarded a plain TensorImpl: its storage can be read unchecked.
  const c10::TensorImpl* impl = value.unsafeToTensorImpl();
  if (written || impl->unsafe_storage().unsafeGetStorageImpl() != slot.storage.get() ||
      ((kept.version < 0 || VersionOf(*impl) != kept.version) && !SameLayout(*impl, kept)))
      [[unlikely]] {
    Rebuild(value, kept, index, written);
  }
  // Else untouched: the model's own tensor.
  guard.slot = -1;
  if (guard.own) guard.kept.grad_fn.reset();
  Release(index, guard.own);
}

[[gnu::noinline]] void WriteGuards::Rebuild(c10::IValue& value, const KeptTensor& kept,
                                            int32_t index, bool written) {
  const Slot& slot = slots[index];
  const c10::TensorImpl* impl = value.unsafeToTensorImpl();
  // The bytes as they were: the copy if the storage was written, else the storage (only the
  // tensor's metadata or its storage changed).
  const c10::intrusive_ptr<c10::StorageImpl>& bytes = written ? slot.copy : slot.storage;
  for (const Rebuilt& r : rebuilt_) {
    const c10::TensorImpl* done = r.tensor.unsafeGetTensorImpl();
    if (r.original.unsafeGetTensorImpl() == impl &&
        done->storage().unsafeGetStorageImpl() == bytes.get() && SameLayout(*done, kept) &&
        r.grad_fn == kept.grad_fn.get() && r.output_nr == kept.output_nr && r.leaf == kept.leaf) {
      value = r.tensor;
      return;
    }
  }
  Rebuilt rebuilt{value.toTensor(), at::Tensor(), kept.grad_fn.get(), kept.output_nr, kept.leaf};
  at::Tensor tensor;
  {
    // An inference tensor comes back as one (the constructor reads the mode for its keys).
    std::optional<c10::InferenceMode> mode;
    if (kept.inference) mode.emplace();
    auto rebuilt_impl =
        c10::make_intrusive<c10::TensorImpl>(c10::Storage(bytes), kept.key_set, kept.dtype);
    rebuilt_impl->set_sizes_and_strides(kept.sizes(), kept.strides(), kept.storage_offset);
    tensor = at::Tensor(std::move(rebuilt_impl));
  }
  if (kept.grad_fn) {
    tensor =
        torch::autograd::make_variable(tensor, torch::autograd::Edge(kept.grad_fn, kept.output_nr));
  } else if (kept.leaf && value.toTensor().requires_grad() && !value.toTensor().grad_fn()) {
    // A leaf's: its gradient goes to the leaf's accumulator, as the leaf's own would. (A
    // leaf the forward gave history, or took requires_grad from, comes back without.)
    tensor = torch::autograd::make_variable(tensor,
                                            torch::autograd::impl::gradient_edge(value.toTensor()));
  }
  rebuilt.tensor = tensor;
  rebuilt_.push_back(std::move(rebuilt));
  value = std::move(tensor);
}

void WriteGuards::Reset() {
  last_ = -1;
  armed_.clear();
  rebuilt_.clear();
}

}  // namespace hooks_internal
}  // namespace kd
