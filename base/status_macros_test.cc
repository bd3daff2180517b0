#include "base/status_macros.h"

#include <memory>
#include <string>

#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kd {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  KD_ASSIGN_OR_RETURN(int half, Half(x));
  KD_ASSIGN_OR_RETURN(half, Half(half));  // assigns to an existing variable
  return half;
}

absl::Status CheckEven(int x) {
  KD_RETURN_IF_ERROR(Half(x));
  KD_RETURN_IF_ERROR(absl::OkStatus());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<int>> MoveOnly(bool ok) {
  if (!ok) return absl::NotFoundError("none");
  return std::make_unique<int>(7);
}

absl::StatusOr<int> UseMoveOnly(bool ok) {
  KD_ASSIGN_OR_RETURN(std::unique_ptr<int> p, MoveOnly(ok));
  return *p;
}

TEST(StatusMacrosTest, AssignOrReturn) {
  EXPECT_THAT(Quarter(8), IsOkAndHolds(2));
  EXPECT_THAT(Quarter(6), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("odd")));
  EXPECT_THAT(Quarter(5), StatusIs(absl::StatusCode::kInvalidArgument, "odd"));
  EXPECT_THAT(UseMoveOnly(true), IsOkAndHolds(7));
  EXPECT_THAT(UseMoveOnly(false), StatusIs(absl::StatusCode::kNotFound, "none"));
}

TEST(StatusMacrosTest, ReturnIfError) {
  EXPECT_THAT(CheckEven(4), IsOk());
  EXPECT_THAT(CheckEven(3), StatusIs(absl::StatusCode::kInvalidArgument, "odd"));
}

TEST(StatusMatchersTest, MatchersRejectWhatTheyShould) {
  EXPECT_THAT(absl::InternalError("x"), ::testing::Not(IsOk()));
  EXPECT_THAT(Half(3), ::testing::Not(IsOkAndHolds(1)));
  EXPECT_THAT(Half(4), ::testing::Not(IsOkAndHolds(3)));
  EXPECT_THAT(absl::InternalError("x"),
              ::testing::Not(StatusIs(absl::StatusCode::kNotFound, "x")));
}

}  // namespace
}  // namespace kd
