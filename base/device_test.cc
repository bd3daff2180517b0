#include "base/device.h"

#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kd {
namespace {

using ::testing::HasSubstr;

TEST(DeviceTest, Cpu) {
  EXPECT_THAT(ParseDevice("cpu"), IsOkAndHolds(c10::Device(c10::kCPU)));
}

TEST(DeviceTest, MalformedIsInvalidArgument) {
  for (const char* spec : {"", "gpu", "cuda:x", "cuda:-1", "meta"}) {
    SCOPED_TRACE(spec);
    EXPECT_THAT(ParseDevice(spec),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         absl::StrCat("bad device \"", spec, "\": use cpu, cuda or cuda:N")));
  }
}

// This test binary links libtorch's CPU libraries only, like every libkd library target.
TEST(DeviceTest, CudaWithoutBackendSaysHowToLinkIt) {
  ASSERT_FALSE(CudaBackendLinked());
  EXPECT_THAT(ParseDevice("cuda:0"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cuda:0: this binary has no CUDA backend (libtorch_cuda is not "
                                 "loaded: link @libtorch//:cuda")));
}

}  // namespace
}  // namespace kd
