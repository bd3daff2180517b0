// The safetensors reader (base/safetensors.h) on arbitrary bytes: the header length, the JSON
// header and every claim in it, the copy of each tensor's bytes.
#include <cstdint>

#include "absl/strings/string_view.h"
#include "base/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)kd::ParseSafetensors(absl::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  return 0;
}
