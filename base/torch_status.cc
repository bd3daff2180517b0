#include "base/torch_status.h"

#include <string>

#include "absl/strings/ascii.h"

namespace kd {

absl::Status StatusFromTorchError(const c10::Error& error, absl::StatusCode code) {
  std::string message(error.what_without_backtrace());
  // c10 appends the failing check and source location after the message; keep the message.
  return absl::Status(code, absl::StripTrailingAsciiWhitespace(message));
}

}  // namespace kd
