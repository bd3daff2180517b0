// The flag-file reader (tools/flags.h, what every tool's --flagfile=F reads) on arbitrary text:
// lines split, comments skipped, each line checked as a command-line flag of this program (the
// flags below, one of each kind the tools have), problems returned as statuses, never a crash.
#include <cstdint>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/string_view.h"
#include "tools/flags.h"

ABSL_FLAG(std::string, config, "", "a string flag");
ABSL_FLAG(int, threads, 0, "an int flag");
ABSL_FLAG(bool, resume, false, "a bool flag");
ABSL_FLAG(double, rate, 0.5, "a double flag");
ABSL_FLAG(std::optional<int64_t>, seed, std::nullopt, "an optional flag");

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  (void)kd::ParseFlagFile(text, "fuzz.flags");
  return 0;
}
