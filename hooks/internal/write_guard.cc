#include "hooks/internal/write_guard.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <functional>
#include <optional>
#include <typeinfo>
#include <utility>

#include <ATen/core/grad_mode.h>
#include <c10/core/Allocator.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/StorageMaterializer.h>
#include <torch/csrc/autograd/variable.h>

#include "hooks/internal/lazy_clone.h"

namespace kd {
namespace hooks_internal {
namespace {

constexpr int kChunks = 64;
constexpr int kSlotsPerChunk = 64;
constexpr int kSlots = kChunks * kSlotsPerChunk;

// One armed storage. Between its acquisition and its release a slot belongs to one recorder,
// which alone touches `storage`, `owner` and `guards`; the write hook, on any thread, only
// reads `storage` and sets `copy`, then `written`.
struct Slot {
  c10::intrusive_ptr<c10::StorageImpl> storage;  // held while armed
  const WriteGuards* owner = nullptr;
  int32_t guards = 0;                         // the guards sharing it
  c10::intrusive_ptr<c10::StorageImpl> copy;  // the bytes before the first write
  std::atomic<bool> written{false};
};

// Namespace scope (no function-local static guard on the hot path): nothing records values
// before main.
Slot slots[kSlots];

// Bit i of chunk c: slot c * 64 + i is taken.
std::atomic<uint64_t> used_slots[kChunks];

std::atomic<int64_t> copies_made{0};

int32_t AcquireSlot(int& hint) {
  for (int n = 0; n < kChunks; ++n) {
    const int chunk = (hint + n) % kChunks;
    uint64_t used = used_slots[chunk].load(std::memory_order_relaxed);
    while (used != ~uint64_t{0}) {
      const int bit = std::countr_zero(~used);
      if (used_slots[chunk].compare_exchange_weak(used, used | (uint64_t{1} << bit),
                                                  std::memory_order_acquire,
                                                  std::memory_order_relaxed)) {
        hint = chunk;
        return chunk * kSlotsPerChunk + bit;
      }
    }
  }
  return -1;
}

// The last guard on `index` went: disarms the storage and frees the slot.
[[gnu::noinline]] void FreeSlot(int32_t index) {
  Slot& slot = slots[index];
  if (!slot.written.load(std::memory_order_acquire)) slot.storage->clear_materializer();
  slot.storage.reset();
  slot.copy.reset();
  slot.owner = nullptr;
  used_slots[index / kSlotsPerChunk].fetch_and(~(uint64_t{1} << (index % kSlotsPerChunk)),
                                               std::memory_order_release);
}

// One guard less on `index`.
inline void ReleaseSlot(int32_t index) {
  if (--slots[index].guards == 0) FreeSlot(index);
}

// The write hook of slot `index`: libtorch calls it before the first write into the armed
// storage, then disarms it. If the copy throws, the hook stays and the write does not happen.
void CopyBeforeWrite(int32_t index, c10::StorageImpl* storage) {
  Slot& slot = slots[index];
  if (slot.storage.get() != storage || slot.written.load(std::memory_order_relaxed)) return;
  const size_t nbytes = storage->nbytes();
  c10::Allocator* allocator = storage->allocator();
  slot.copy = c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes,
                                                    allocator->clone(storage->data(), nbytes),
                                                    allocator, storage->resizable());
  slot.written.store(true, std::memory_order_release);
  copies_made.fetch_add(1, std::memory_order_relaxed);
}

// A write hook is a plain function pointer: one function per slot.
template <size_t kIndex>
void CopyBeforeWriteTo(c10::StorageImpl* storage) {
  CopyBeforeWrite(kIndex, storage);
}

template <size_t... kIndex>
constexpr std::array<c10::MaterializeFn, sizeof...(kIndex)> MakeHooks(
    std::index_sequence<kIndex...>) {
  return {&CopyBeforeWriteTo<kIndex>...};
}

constexpr std::array<c10::MaterializeFn, kSlots> kHooks =
    MakeHooks(std::make_index_sequence<kSlots>());

bool SameLayout(const c10::TensorImpl& impl, const WriteGuard& guard) {
  return impl.storage_offset() == guard.storage_offset && impl.dtype() == guard.dtype &&
         impl.sizes().equals(guard.sizes()) && impl.strides().equals(guard.strides());
}

}  // namespace

WriteGuard::WriteGuard() = default;

WriteGuard::~WriteGuard() {
  if (slot >= 0) ReleaseSlot(slot);
}

WriteGuard::WriteGuard(WriteGuard&& other) noexcept
    : slot(std::exchange(other.slot, -1)),
      dim(other.dim),
      layout_heap(std::move(other.layout_heap)),
      storage_offset(other.storage_offset),
      key_set(other.key_set),
      dtype(other.dtype),
      inference(other.inference),
      version(other.version),
      grad_fn(std::move(other.grad_fn)),
      output_nr(other.output_nr) {
  if (dim <= kInlineDims) std::copy_n(other.layout_inline, 2 * dim, layout_inline);
}

WriteGuard& WriteGuard::operator=(WriteGuard&& other) noexcept {
  if (this != &other) {
    if (slot >= 0) ReleaseSlot(slot);
    slot = std::exchange(other.slot, -1);
    dim = other.dim;
    if (dim <= kInlineDims) std::copy_n(other.layout_inline, 2 * dim, layout_inline);
    layout_heap = std::move(other.layout_heap);
    storage_offset = other.storage_offset;
    key_set = other.key_set;
    dtype = other.dtype;
    inference = other.inference;
    version = other.version;
    grad_fn = std::move(other.grad_fn);
    output_nr = other.output_nr;
  }
  return *this;
}

WriteGuards::WriteGuards()
    : chunk_hint_(static_cast<int>(std::hash<const void*>()(this) % kChunks)) {}

int64_t WriteGuards::CopiesMade() { return copies_made.load(std::memory_order_relaxed); }

bool WriteGuards::Share(int32_t index, const c10::StorageImpl& storage) const {
  Slot& slot = slots[index];
  if (slot.storage.get() != &storage || slot.owner != this ||
      slot.written.load(std::memory_order_acquire)) {
    return false;
  }
  ++slot.guards;
  return true;
}

int32_t WriteGuards::Arm(c10::StorageImpl& storage) {
  // The slot used last (the previous hooked module's output, say): no search.
  if (last_ >= 0 && Share(last_, storage)) [[likely]] {
    return last_;
  }
  return ArmAgain(storage);
}

[[gnu::noinline]] int32_t WriteGuards::ArmAgain(c10::StorageImpl& storage) {
  if (storage.has_materializer()) {
    // This recorder's, kept again (a block's input after its first layer's)?
    for (int32_t index : armed_) {
      if (Share(index, storage)) return last_ = index;
    }
    return -1;  // another recorder's, or copy-on-write
  }
  const int32_t index = AcquireSlot(chunk_hint_);
  if (index < 0) return -1;
  Slot& slot = slots[index];
  slot.storage = c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(&storage);
  slot.owner = this;
  slot.guards = 1;
  slot.written.store(false, std::memory_order_relaxed);
  storage.set_materializer(kHooks[index]);
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

}  // namespace

// Arms a slot on `storage` for `guard` and records the tensor's metadata and version in it;
// false where no slot serves.
[[gnu::always_inline]] inline bool WriteGuards::Guard(c10::TensorImpl& impl,
                                                      c10::StorageImpl& storage,
                                                      WriteGuard& guard) {
  const int32_t slot = Arm(storage);
  if (slot < 0) [[unlikely]] {
    return false;
  }
  guard.slot = slot;
  const c10::IntArrayRef sizes = impl.sizes(), strides = impl.strides();
  const size_t dims = sizes.size();
  guard.dim = static_cast<int32_t>(dims);
  int64_t* layout = dims <= WriteGuard::kInlineDims
                        ? guard.layout_inline
                        : (guard.layout_heap = std::make_unique<int64_t[]>(2 * dims)).get();
  for (size_t i = 0; i < dims; ++i) {
    layout[i] = sizes[i];
    layout[dims + i] = strides[i];
  }
  guard.storage_offset = impl.storage_offset();
  guard.key_set = impl.key_set();
  guard.dtype = impl.dtype();
  guard.inference = impl.is_inference();
  const c10::VariableVersion& version = impl.version_counter();
  guard.version = version.enabled() ? int64_t{version.current_version()} : -1;
  return true;
}

void WriteGuards::Keep(c10::IValue& value, WriteGuard& guard) {
  c10::TensorImpl* impl = value.isTensor() ? value.unsafeToTensorImpl() : nullptr;
  c10::StorageImpl* storage = impl != nullptr ? GuardableStorage(*impl) : nullptr;
  if (storage == nullptr) [[unlikely]] {
    value = LazyCloneValue(value);  // others get a copy now
    return;
  }
  if (impl->requires_grad()) {
    KeepWithHistory(value, *impl, *storage, guard);
    return;
  }
  if (!Guard(*impl, *storage, guard)) [[unlikely]] {
    value = LazyCloneValue(value);
  }
}

[[gnu::noinline]] void WriteGuards::KeepWithHistory(c10::IValue& value, c10::TensorImpl& impl,
                                                    c10::StorageImpl& storage, WriteGuard& guard) {
  const at::Tensor& t = value.toTensor();
  // A leaf's history is its accumulator, and without autograd a copy drops requires_grad:
  // both stay with the copy.
  c10::intrusive_ptr<torch::autograd::Node> grad_fn;
  if (!at::GradMode::is_enabled() || !(grad_fn = t.grad_fn()) || !Guard(impl, storage, guard)) {
    value = LazyCloneValue(value);
    return;
  }
  guard.grad_fn = std::move(grad_fn);
  guard.output_nr = t.output_nr();
}

void WriteGuards::ResolveInPlace(c10::IValue& value, WriteGuard& kept) {
  const int32_t index = kept.slot;
  if (index < 0) return;
  const Slot& slot = slots[index];
  const bool written = slot.written.load(std::memory_order_acquire);
  // Keep guarded a plain TensorImpl: its storage can be read unchecked.
  const c10::TensorImpl* impl = value.unsafeToTensorImpl();
  if (written || impl->unsafe_storage().unsafeGetStorageImpl() != slot.storage.get() ||
      ((kept.version < 0 || impl->version_counter().current_version() != kept.version) &&
       !SameLayout(*impl, kept))) [[unlikely]] {
    Rebuild(value, kept, written);
  }
  // Else untouched: the model's own tensor.
  kept.slot = -1;
  kept.grad_fn.reset();
  ReleaseSlot(index);
}

[[gnu::noinline]] void WriteGuards::Rebuild(c10::IValue& value, WriteGuard& kept, bool written) {
  const Slot& slot = slots[kept.slot];
  const c10::TensorImpl* impl = value.unsafeToTensorImpl();
  // The bytes as they were: the copy if the storage was written, else the storage (only the
  // tensor's metadata or its storage changed).
  const c10::intrusive_ptr<c10::StorageImpl>& bytes = written ? slot.copy : slot.storage;
  for (const Rebuilt& r : rebuilt_) {
    const c10::TensorImpl* done = r.tensor.unsafeGetTensorImpl();
    if (r.original.unsafeGetTensorImpl() == impl &&
        done->storage().unsafeGetStorageImpl() == bytes.get() && SameLayout(*done, kept) &&
        r.tensor.grad_fn().get() == kept.grad_fn.get() &&
        (!kept.grad_fn || r.tensor.output_nr() == kept.output_nr)) {
      value = r.tensor;
      return;
    }
  }
  at::Tensor tensor;
  {
    // An inference tensor comes back as one (the constructor reads the mode for its keys).
    std::optional<c10::InferenceMode> mode;
    if (kept.inference) mode.emplace();
    auto rebuilt =
        c10::make_intrusive<c10::TensorImpl>(c10::Storage(bytes), kept.key_set, kept.dtype);
    rebuilt->set_sizes_and_strides(kept.sizes(), kept.strides(), kept.storage_offset);
    tensor = at::Tensor(std::move(rebuilt));
  }
  if (kept.grad_fn) {
    tensor = torch::autograd::make_variable(
        tensor, torch::autograd::Edge(std::move(kept.grad_fn), kept.output_nr));
  }
  rebuilt_.push_back(Rebuilt{value.toTensor(), tensor});
  value = std::move(tensor);
}

void WriteGuards::Reset() {
  last_ = -1;
  armed_.clear();
  rebuilt_.clear();
}

}  // namespace hooks_internal
}  // namespace kd
