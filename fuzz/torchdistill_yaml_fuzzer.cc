// The torchdistill YAML importer on arbitrary text: yaml-cpp's parse, torchdistill's tags,
// aliases and merge keys, the translation. Must return (an error or reports are fine), never
// crash, hang or overflow (a cyclic alias, deep nesting).
#include <cstdint>
#include <string>

#include "distill/torchdistill/importer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<kd::torchdistill::Import> imported =
      kd::torchdistill::ImportText(text, "fuzz.yaml");
  if (imported.ok()) (void)imported->config.ByteSizeLong();
  return 0;
}
