#include "base/torch_status.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>

#include "c10/util/Exception.h"

namespace kd {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(CallTorchTest, PassesValuesThrough) {
  absl::StatusOr<int> value = CallTorch([] { return 7; });
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, 7);
  EXPECT_TRUE(CallTorch([] {}).ok());
}

TEST(CallTorchTest, ATorchErrorBecomesTheCodeWithoutItsBacktrace) {
  const absl::Status status =
      CallTorch([] { TORCH_CHECK(false, "bad shape [2, 3]"); }, absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("bad shape [2, 3]"));
  EXPECT_THAT(std::string(status.message()), Not(HasSubstr("Exception raised from")));
}

TEST(CallTorchTest, AContextGoesInFrontOfTheFirstLine) {
  const absl::StatusOr<int> value =
      CallTorch("teacher.optimize_for_inference", absl::StatusCode::kInvalidArgument, []() -> int {
        TORCH_CHECK(false, "cannot freeze\nsecond line");
        return 0;
      });
  EXPECT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(value.status().message(), "teacher.optimize_for_inference: cannot freeze");
}

TEST(CallTorchTest, AStdExceptionIsCaughtToo) {
  const absl::Status status = CallTorch("store", absl::StatusCode::kUnavailable,
                                        [] { throw std::runtime_error("connection reset\n"); });
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(), "store: connection reset");
}

TEST(TorchErrorLineTest, KeepsOnlyTheMessagesFirstLine) {
  try {
    TORCH_CHECK(false, "first\nsecond");
  } catch (const c10::Error& e) {
    EXPECT_EQ(TorchErrorLine(e), "first");
  }
}

}  // namespace
}  // namespace kd
