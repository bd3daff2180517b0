// gmock matchers for absl::Status and absl::StatusOr (absl 20220623 ships none).
//
//   EXPECT_THAT(LoadConfig(path), IsOk());
//   EXPECT_THAT(registry.Get("nope"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));
//   EXPECT_THAT(ParseInt("3"), IsOkAndHolds(3));
#ifndef LIBKD_TESTING_STATUS_MATCHERS_H_
#define LIBKD_TESTING_STATUS_MATCHERS_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace kd {
namespace testing_internal {

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

}  // namespace testing_internal

// Matches an OK absl::Status or absl::StatusOr.
MATCHER(IsOk, "is OK") {
  const absl::Status& status = testing_internal::GetStatus(arg);
  if (!status.ok()) *result_listener << "status: " << status;
  return status.ok();
}

// Matches a status (or StatusOr) with `code`, whatever its message.
MATCHER_P(StatusIs, code, "has code " + absl::StatusCodeToString(code)) {
  const absl::Status& status = testing_internal::GetStatus(arg);
  *result_listener << "status: " << status;
  return status.code() == code;
}

// Matches a status (or StatusOr) with `code` and a message matching `message_matcher`.
MATCHER_P2(StatusIs, code, message_matcher,
           "has code " + absl::StatusCodeToString(code) + " and a message that " +
               ::testing::DescribeMatcher<std::string>(message_matcher)) {
  const absl::Status& status = testing_internal::GetStatus(arg);
  *result_listener << "status: " << status;
  return status.code() == code &&
         ::testing::ExplainMatchResult(message_matcher, std::string(status.message()),
                                       result_listener);
}

// Matches an OK StatusOr whose value matches `value_matcher`.
MATCHER_P(IsOkAndHolds, value_matcher, "is OK and holds a matching value") {
  if (!arg.ok()) {
    *result_listener << "status: " << arg.status();
    return false;
  }
  return ::testing::ExplainMatchResult(value_matcher, *arg, result_listener);
}

}  // namespace kd

#endif  // LIBKD_TESTING_STATUS_MATCHERS_H_
