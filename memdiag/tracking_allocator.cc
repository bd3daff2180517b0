#include "memdiag/tracking_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

namespace kd {
namespace {

// Each allocation carries a header with its size, one alignment unit before the data, so
// the data keeps c10's alignment. The data pointer is also the DataPtr's context, as
// Allocator::raw_allocate requires (oneDNN allocates its scratch space that way).
constexpr size_t kHeader = c10::gAlignment;

TrackingAllocator* tracker = nullptr;

}  // namespace

TrackingAllocator& TrackingAllocator::Install() {
  static TrackingAllocator* instance = [] {
    auto* t = new TrackingAllocator();  // never destroyed: tensors may outlive main
    tracker = t;
    c10::SetAllocator(c10::DeviceType::CPU, t, /*priority=*/1);
    return t;
  }();
  return *instance;
}

c10::DataPtr TrackingAllocator::allocate(size_t nbytes) {
  void* base = c10::alloc_cpu(nbytes + kHeader);
  *static_cast<size_t*>(base) = nbytes;
  void* data = static_cast<char*>(base) + kHeader;
  const int64_t live = live_.fetch_add(static_cast<int64_t>(nbytes)) + nbytes;
  int64_t peak = peak_.load(std::memory_order_relaxed);
  while (live > peak && !peak_.compare_exchange_weak(peak, live)) {
  }
  allocations_.fetch_add(1, std::memory_order_relaxed);
  if (c10::memoryProfilingEnabled()) {
    c10::reportMemoryUsageToProfiler(data, static_cast<int64_t>(nbytes), live, 0,
                                     c10::Device(c10::DeviceType::CPU));
  }
  return {data, data, &Delete, c10::Device(c10::DeviceType::CPU)};
}

void TrackingAllocator::Delete(void* data) {
  void* base = static_cast<char*>(data) - kHeader;
  const size_t nbytes = *static_cast<size_t*>(base);
  const int64_t live = tracker->live_.fetch_sub(static_cast<int64_t>(nbytes)) - nbytes;
  if (c10::memoryProfilingEnabled()) {
    c10::reportMemoryUsageToProfiler(data, -static_cast<int64_t>(nbytes), live, 0,
                                     c10::Device(c10::DeviceType::CPU));
  }
  c10::free_cpu(base);
}

void TrackingAllocator::ResetPeak() {
  const int64_t live = live_.load();
  baseline_.store(live);
  peak_.store(live);
}

}  // namespace kd
