#include "hooks/internal/write_slots.h"

#include <array>
#include <bit>
#include <cstddef>
#include <utility>

#include <c10/core/Allocator.h>
#include <torch/csrc/autograd/variable.h>  // Slot destroys a KeptTensor's autograd::Node

namespace kd {
namespace hooks_internal {

Slot slots[kSlots];

namespace {

// Bit i of chunk c: slot c * 64 + i is taken.
std::atomic<uint64_t> used_slots[kChunks];

std::atomic<int64_t> copies_made{0};

}  // namespace

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

void ReturnSlot(int32_t index) {
  used_slots[index / kSlotsPerChunk].fetch_and(~(uint64_t{1} << (index % kSlotsPerChunk)),
                                               std::memory_order_release);
}

namespace {

// WriteHook(index)'s work.
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

}  // namespace

c10::MaterializeFn WriteHook(int32_t index) { return kHooks[index]; }

int64_t CopiesMade() { return copies_made.load(std::memory_order_relaxed); }

}  // namespace hooks_internal
}  // namespace kd
