// A CPU allocator that counts live and peak bytes of every tensor allocated after Install().
//
//   kd::TrackingAllocator& tracker = kd::TrackingAllocator::Install();
//   tracker.ResetPeak();
//   model.Forward({x});
//   int64_t peak = tracker.peak_bytes() - tracker.baseline_bytes();
//
// It replaces libtorch's CPU allocator for tensors created afterwards, on all threads (c10's
// SetAllocator with priority 1), and reports to the profiler as c10's own allocator does.
// Memory allocated before Install(), and what oneDNN or BLAS malloc internally, is not seen.
// The memory-diagnostics package (inventories, owners, leaks) will build on it.
#ifndef LIBKD_MEMDIAG_TRACKING_ALLOCATOR_H_
#define LIBKD_MEMDIAG_TRACKING_ALLOCATOR_H_

#include <atomic>
#include <cstdint>

#include <c10/core/Allocator.h>

namespace kd {

class TrackingAllocator final : public c10::Allocator {
 public:
  // Installs the process-wide tracker on first call; returns it.
  static TrackingAllocator& Install();

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
  // Allocations made since Install().
  int64_t num_allocations() const { return allocations_.load(std::memory_order_relaxed); }

 private:
  TrackingAllocator() = default;
  static void Delete(void* context);

  std::atomic<int64_t> live_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> baseline_{0};
  std::atomic<int64_t> allocations_{0};
};

}  // namespace kd

#endif  // LIBKD_MEMDIAG_TRACKING_ALLOCATOR_H_
