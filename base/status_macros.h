// Status macros with abseil's later semantics (absl 20220623 has none), and kd::WithContext,
// the one way to add context to a status.
//
//   absl::Status Load(const std::string& path) {
//     KD_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
//     KD_RETURN_IF_ERROR(Parse(text));
//     return absl::OkStatus();
//   }
#ifndef LIBKD_BASE_STATUS_MACROS_H_
#define LIBKD_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

// Returns the status of `expr` from the enclosing function if it is not OK.
#define KD_RETURN_IF_ERROR(expr)                                  \
  do {                                                            \
    ::absl::Status kd_status_ = ::kd::base_internal::AsStatus((expr)); \
    if (!kd_status_.ok()) return kd_status_;                      \
  } while (false)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status, else moves the value
// into `lhs`, which may be a declaration (`auto x`) or an existing variable.
#define KD_ASSIGN_OR_RETURN(lhs, rexpr) \
  KD_ASSIGN_OR_RETURN_IMPL_(KD_STATUS_MACROS_CONCAT_(kd_statusor_, __LINE__), lhs, rexpr)

#define KD_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                              \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)

#define KD_STATUS_MACROS_CONCAT_INNER_(x, y) x##y
#define KD_STATUS_MACROS_CONCAT_(x, y) KD_STATUS_MACROS_CONCAT_INNER_(x, y)

namespace kd {
namespace base_internal {
inline const absl::Status& AsStatus(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& AsStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}
}  // namespace base_internal
}  // namespace kd

namespace kd {

// libkd's one way to add context to an error: the same code, the message prefixed with where it
// happened ("stage \"kd\": " + message). OK passes through unchanged.
//
//   return kd::WithContext("teacher.src_ckpt", model->LoadState(path));
inline absl::Status WithContext(absl::string_view context, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

// The same for a value or an error: the value passes through unchanged.
template <typename T>
absl::StatusOr<T> WithContext(absl::string_view context, absl::StatusOr<T> value) {
  if (value.ok()) return value;
  return WithContext(context, value.status());
}

}  // namespace kd

#endif  // LIBKD_BASE_STATUS_MACROS_H_
