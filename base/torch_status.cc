#include "base/torch_status.h"

#include <string>

#include "absl/strings/ascii.h"

namespace kd {

absl::Status StatusFromTorchError(const c10::Error& error, absl::StatusCode code) {
  std::string message(error.what_without_backtrace());
  // c10 appends the failing check and source location after the message; keep the message.
  return absl::Status(code, absl::StripTrailingAsciiWhitespace(message));
}

std::string TorchErrorLine(const std::exception& error) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&error);
  const std::string text =
      torch_error != nullptr ? torch_error->what_without_backtrace() : error.what();
  return std::string(absl::StripTrailingAsciiWhitespace(text.substr(0, text.find('\n'))));
}

}  // namespace kd
