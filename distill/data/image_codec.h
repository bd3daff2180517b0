// JPEG and PNG files decoded to RGB as torchvision's ImageFolder reads them (PIL's
// Image.open(path).convert("RGB")), with Debian's libjpeg-turbo and libpng: the format told by
// the file's first bytes (not its name), greyscale replicated, alpha dropped (not composited),
// palettes looked up, 16-bit RGB cut to its high bytes and 16-bit grey clipped at 255 (as PIL
// converts "I;16"), gamma left alone. Pixel for pixel PIL's for baseline and progressive JPEG
// (libjpeg's integer IDCT and fancy upsampling, PIL's settings) and PNG (image_codec_test).
//
//   KD_ASSIGN_OR_RETURN(at::Tensor rgb, kd::ReadImageRgb("/data/train/n01440764/x.JPEG"));
//   // uint8 [height, width, 3]
#ifndef LIBKD_DISTILL_DATA_IMAGE_CODEC_H_
#define LIBKD_DISTILL_DATA_IMAGE_CODEC_H_

#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kd {

// The most pixels an image may have: PIL's decompression-bomb bound (2 * Image.MAX_IMAGE_PIXELS),
// checked from the header before anything is allocated.
inline constexpr int64_t kMaxImagePixels = 2 * int64_t{89478485};

// `bytes` (a whole JPEG or PNG file; `name` says which in messages) as uint8 RGB [height, width,
// 3]. InvalidArgument naming `name` and the fault: empty, neither JPEG nor PNG, truncated or
// corrupt, more than kMaxImagePixels pixels, a form PIL would not read as RGB the same way
// (CMYK JPEG, 16-bit grey with alpha).
absl::StatusOr<at::Tensor> DecodeImageRgb(absl::string_view bytes, absl::string_view name);

// The file at `path`, read and decoded (NotFound / InvalidArgument naming it).
absl::StatusOr<at::Tensor> ReadImageRgb(const std::string& path);

}  // namespace kd

#endif  // LIBKD_DISTILL_DATA_IMAGE_CODEC_H_
