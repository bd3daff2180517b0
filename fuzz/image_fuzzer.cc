// The JPEG and PNG decoder (ImageFolder's images) on arbitrary bytes.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "distill/data/image_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)kd::DecodeImageRgb(absl::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  return 0;
}
