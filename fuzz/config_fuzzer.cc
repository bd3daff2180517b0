// The config parser and validator on arbitrary text: ParseConfig, then ValidateConfig and the
// summary of what parses. Must return (an error is fine), never crash, hang or overflow.
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "distill/config/config_loader.h"
#include "distill/config/config_summary.h"
#include "distill/config/config_validator.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<kd::LoadedConfig> loaded = kd::ParseConfig(text, "fuzz.pbtxt");
  if (!loaded.ok()) return 0;
  const std::vector<kd::ConfigProblem> problems = kd::ValidateConfig(*loaded, {});
  for (const kd::ConfigProblem& p : problems) (void)p.ToString();
  if (!kd::HasErrors(problems)) (void)kd::SummarizeConfig(loaded->config);
  return 0;
}
