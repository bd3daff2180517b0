// ParseDevice in a binary linked with @libtorch//:cuda: on a machine without a GPU the error
// says so; where GPUs exist, every index is accepted and the one past the end is refused.
#include <torch/cuda.h>

#include "base/device.h"
#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kd {
namespace {

using ::testing::HasSubstr;

// @libtorch//:cuda defines LIBKD_CUDA_BACKEND where it links libtorch_cuda; a lean install
// (torch without its CUDA libraries) leaves it empty.
#ifdef LIBKD_CUDA_BACKEND
TEST(DeviceCudaTest, BackendIsLinked) { EXPECT_TRUE(CudaBackendLinked()); }
#else
TEST(DeviceCudaTest, LeanInstallHasNoBackend) {
  EXPECT_FALSE(CudaBackendLinked());
  EXPECT_THAT(ParseDevice("cuda"), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("this binary has no CUDA backend")));
}
#endif

TEST(DeviceCudaTest, AvailabilityMatchesDeviceCount) {
  if (!CudaBackendLinked()) GTEST_SKIP() << "no CUDA backend in this build";
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  if (count == 0) {
    EXPECT_THAT(ParseDevice("cuda"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("cuda: no CUDA device is available here")));
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    EXPECT_THAT(ParseDevice(absl::StrCat("cuda:", i)),
                IsOkAndHolds(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i))));
  }
  EXPECT_THAT(ParseDevice(absl::StrCat("cuda:", count)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("there are only")));
}

}  // namespace
}  // namespace kd
