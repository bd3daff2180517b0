#include "memdiag/tracking_allocator.h"

#include <ATen/ATen.h>
#include <c10/core/alignment.h>

#include "gtest/gtest.h"

namespace kd {
namespace {

TEST(TrackingAllocatorTest, CountsLiveAndPeakBytesOfTensors) {
  TrackingAllocator& tracker = TrackingAllocator::Install();
  tracker.ResetPeak();
  const int64_t before = tracker.live_bytes();
  {
    at::Tensor a = at::empty({1000}, at::kFloat);  // 4000 bytes
    EXPECT_EQ(tracker.live_bytes() - before, 4000);
    {
      at::Tensor b = at::empty({250, 2}, at::kDouble);  // 4000 bytes
      EXPECT_EQ(tracker.live_bytes() - before, 8000);
    }
    EXPECT_EQ(tracker.live_bytes() - before, 4000);
    EXPECT_EQ(a.data_ptr<float>() == nullptr, false);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data_ptr()) % c10::gAlignment, 0u);
  }
  EXPECT_EQ(tracker.live_bytes(), before);
  EXPECT_EQ(tracker.peak_bytes() - tracker.baseline_bytes(), 8000);
  tracker.ResetPeak();
  EXPECT_EQ(tracker.peak_bytes(), tracker.baseline_bytes());
}

TEST(TrackingAllocatorTest, RawAllocateWorks) {
  // oneDNN and others allocate through raw_allocate, which needs data == context.
  TrackingAllocator& tracker = TrackingAllocator::Install();
  const int64_t before = tracker.live_bytes();
  void* p = tracker.raw_allocate(100);
  EXPECT_EQ(tracker.live_bytes() - before, 100);
  tracker.raw_deallocate(p);
  EXPECT_EQ(tracker.live_bytes(), before);
}

TEST(TrackingAllocatorTest, ComputeThroughTheAllocatorIsCorrect) {
  TrackingAllocator::Install();
  const at::Tensor x = at::arange(10, at::kFloat);
  EXPECT_EQ((x * 2).sum().item<float>(), 90.0f);  // 2 * (0 + ... + 9)
  // A convolution through oneDNN: a 3x3 all-ones kernel over all-ones sums 9 per output.
  const at::Tensor y = at::conv2d(at::ones({1, 1, 5, 5}), at::ones({1, 1, 3, 3}));
  EXPECT_TRUE(at::equal(y, at::full({1, 1, 3, 3}, 9.0f)));
}

}  // namespace
}  // namespace kd
