// The process's write-hook slots (hooks/internal/write_guard.h): one per storage armed at once,
// each with a write hook of its own (libtorch's materializer is a plain function pointer).
// Private to the write_guard library.
#ifndef LIBKD_HOOKS_INTERNAL_WRITE_SLOTS_H_
#define LIBKD_HOOKS_INTERNAL_WRITE_SLOTS_H_

#include <atomic>
#include <cstdint>

#include <c10/core/StorageImpl.h>
#include <c10/core/StorageMaterializer.h>
#include <c10/util/intrusive_ptr.h>

#include "hooks/internal/write_guard.h"

namespace kd {
namespace hooks_internal {

constexpr int kChunks = 64;
constexpr int kSlotsPerChunk = 64;
constexpr int kSlots = kChunks * kSlotsPerChunk;

// One armed storage. Between its acquisition and its release a slot belongs to one recorder,
// which alone touches `storage`, `owner`, `guards` and `first`; the write hook, on any thread,
// only reads `storage` and sets `copy`, then `written`.
struct Slot {
  c10::intrusive_ptr<c10::StorageImpl> storage;  // held while armed
  WriteGuards* owner = nullptr;
  int32_t guards = 0;                         // the guards sharing it
  c10::intrusive_ptr<c10::StorageImpl> copy;  // the bytes before the first write
  std::atomic<bool> written{false};
  // The first tensor kept on the storage, and how many guards use it (0: none; their values
  // hold first.impl, so its address names that tensor while they live).
  KeptTensor first;
  int32_t first_guards = 0;
};

// Every slot, at namespace scope (no function-local static guard on the hot path): nothing
// records values before main.
extern Slot slots[kSlots];

// Takes a free slot, looking from chunk `hint` on (which it updates); -1 if none is free.
int32_t AcquireSlot(int& hint);
// Gives slot `index` back to the process's free slots.
void ReturnSlot(int32_t index);
// The write hook of slot `index`: libtorch calls it before the first write into the armed
// storage, then disarms it; it copies the storage's bytes into the slot's `copy`. If the copy
// throws, the hook stays and the write does not happen.
c10::MaterializeFn WriteHook(int32_t index);
// How many armed storages were written, and so copied, in this process.
int64_t CopiesMade();

}  // namespace hooks_internal
}  // namespace kd

#endif  // LIBKD_HOOKS_INTERNAL_WRITE_SLOTS_H_
