// A CPU allocator that tracks every tensor allocation made after Install():
// live and peak bytes, and each live allocation with its size, sequence number
// and the scope it was allocated in.
//
//   kd::TrackingAllocator& tracker = kd::TrackingAllocator::Install();
//   tracker.ResetPeak();
//   {
//     kd::ScopedMemoryAnnotation scope("eval", /*step=*/3);
//     model.Forward({x});  // allocations here carry "eval", step 3
//   }
//   int64_t peak = tracker.peak_bytes() - tracker.baseline_bytes();
//   for (const kd::Allocation& a : tracker.LiveAllocations()) ...
//
// It replaces libtorch's CPU allocator for tensors created afterwards, on all
// threads (c10's SetAllocator), and reports to the profiler as c10's own
// allocator does, so the profiler's memory events keep working. Uninstall()
// puts the previous allocator back for new tensors; what was allocated here is
// still freed here. Memory allocated before Install(), and what oneDNN or BLAS
// malloc internally, is not seen. Thread-safe.
//
// Each allocation carries a 64-byte header (size, sequence number, scope, step,
// list links) before the data; live allocations are kept in per-thread-sharded
// intrusive lists, so tracking costs a lock of an uncontended shard and no
// allocation (//memdiag:memdiag_benchmark measures it against c10's allocator).
#ifndef LIBKD_MEMDIAG_TRACKING_ALLOCATOR_H_
#define LIBKD_MEMDIAG_TRACKING_ALLOCATOR_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <c10/core/Allocator.h>

#include "absl/strings/string_view.h"

namespace kd {

// A live allocation (or, in a history, the allocation an event is about).
struct Allocation {
  const void* data = nullptr;
  size_t nbytes = 0;
  uint64_t seq = 0;   // counts allocations from 1 since the process began tracking
  std::string scope;  // the innermost ScopedMemoryAnnotation at allocation ("" if none)
  int64_t step = -1;  // its step (-1 if none)
};

// An allocation or a free while history is recorded.
struct AllocationEvent {
  enum class Action { kAlloc, kFree };
  Action action = Action::kAlloc;
  Allocation allocation;
  int64_t time_us = 0;        // since the epoch
  std::vector<void*> frames;  // return addresses, innermost first (empty without frames)
};

namespace memdiag_internal {
// A live allocation's record, as inventories read it from its header (tracking_allocator.cc).
struct LiveRecord {
  const void* data;
  size_t nbytes;
  uint64_t seq;
  uint32_t scope;
  int64_t step;
};
// Inventories (memdiag/inventory.cc): a fresh epoch; Meet for each storage met through a root;
// then the live allocations not marked with `epoch` (the ones no root reaches), given that
// `marked` distinct ones were: the walk stops when num_live() - marked are found. Not
// thread-safe against another inventory; allocations made by other threads meanwhile may be
// missed or cut the walk short.
uint32_t NewMarkEpoch();
enum class Meeting {
  kUntracked,  // not the tracker's allocation
  kFirst,      // marked with `epoch` now: *out is its record, and *slot is kept in its header
  kAgain,      // already marked with `epoch`: *slot is the value kept at the first meeting
};
// A storage's DataPtr met by the inventory of `epoch`; `slot` is the inventory's entry for it.
Meeting Meet(const c10::DataPtr& data, uint32_t epoch, uint32_t* slot, LiveRecord* out);
void ForEachLiveUnmarked(uint32_t epoch, int64_t marked,
                         void (*fn)(void* context, const LiveRecord& record), void* context);
}  // namespace memdiag_internal

class TrackingAllocator final : public c10::Allocator {
 public:
  // Installs the process-wide tracker (again, after Uninstall); returns it.
  static TrackingAllocator& Install();
  // Puts back the allocator Install() replaced, for tensors created afterwards.
  static void Uninstall();
  // Whether new CPU tensors are tracked.
  static bool installed();

  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  // Bytes of tensor memory allocated through this allocator and not yet freed.
  int64_t live_bytes() const { return live_.load(std::memory_order_relaxed); }
  // The highest live_bytes() since Install() or the last ResetPeak().
  int64_t peak_bytes() const { return peak_.load(std::memory_order_relaxed); }
  // live_bytes() at the last ResetPeak().
  int64_t baseline_bytes() const { return baseline_.load(std::memory_order_relaxed); }
  // Starts a new peak measurement from the current live bytes.
  void ResetPeak();
  // Allocations live now.
  int64_t num_live() const { return live_count_.load(std::memory_order_relaxed); }
  // Allocations made since the first Install().
  int64_t num_allocations() const { return allocations_.load(std::memory_order_relaxed); }

  // Every live allocation, oldest first.
  std::vector<Allocation> LiveAllocations() const;
  // The name of the annotated scope the tracker interned as `scope_id` ("" for 0).
  static std::string ScopeName(uint32_t scope_id);
  // The live allocation whose data starts at `data`; false if there is none.
  bool FindAllocation(const void* data, Allocation* out) const;

  // Records every allocation and free from now on (at most `max_entries`, the
  // oldest dropped), with up to `max_frames` return addresses each (0: none;
  // frames cost ~1 us an event).
  void StartHistory(size_t max_entries = 100000, int max_frames = 16);
  // Stops recording; returns the events recorded, in order.
  std::vector<AllocationEvent> StopHistory();
  bool recording_history() const { return history_on_.load(std::memory_order_relaxed); }

 private:
  TrackingAllocator() = default;
  static void Delete(void* context);
  void Record(AllocationEvent::Action action, const void* data, size_t nbytes, uint64_t seq,
              uint32_t scope, int64_t step);

  std::atomic<int64_t> live_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> baseline_{0};
  std::atomic<int64_t> allocations_{0};
  std::atomic<int64_t> live_count_{0};
  std::atomic<bool> history_on_{false};
};

// While alive, allocations on this thread carry `name` and `step` (nested: the
// innermost wins).
class ScopedMemoryAnnotation {
 public:
  explicit ScopedMemoryAnnotation(absl::string_view name, int64_t step = -1);
  ~ScopedMemoryAnnotation();
  ScopedMemoryAnnotation(const ScopedMemoryAnnotation&) = delete;
  ScopedMemoryAnnotation& operator=(const ScopedMemoryAnnotation&) = delete;

 private:
  uint32_t previous_scope_;
  int64_t previous_step_;
};

}  // namespace kd

#endif  // LIBKD_MEMDIAG_TRACKING_ALLOCATOR_H_
