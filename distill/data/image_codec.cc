#include "distill/data/image_codec.h"

#include <jpeglib.h>
// After jpeglib.h, which it needs.
#include <jerror.h>
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file_util.h"

namespace kd {
namespace {

absl::Status Bad(absl::string_view name, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("image ", name, ": ", why));
}

absl::Status CheckSize(absl::string_view name, int64_t width, int64_t height) {
  if (width <= 0 || height <= 0) {
    return Bad(name, absl::StrCat("its header says ", width, " x ", height, " pixels"));
  }
  if (width * height > kMaxImagePixels) {
    return Bad(name, absl::StrCat(width, " x ", height, " pixels is more than ", kMaxImagePixels,
                                  " (PIL's decompression-bomb bound): not decoded"));
  }
  return absl::OkStatus();
}

// ---- JPEG (libjpeg's API, libjpeg-turbo) ------------------------------------------------------

struct JpegError {
  jpeg_error_mgr manager;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated = false;
};

[[noreturn]] void JpegFail(j_common_ptr info) {
  auto* error = reinterpret_cast<JpegError*>(info->err);
  (*info->err->format_message)(info, error->message);
  std::longjmp(error->jump, 1);
}

// Warnings: a premature end of the data (libjpeg fills the rest with grey) is PIL's "image file
// is truncated"; the others (extraneous bytes before a marker) PIL reads through as well.
void JpegWarn(j_common_ptr info, int level) {
  auto* error = reinterpret_cast<JpegError*>(info->err);
  if (level < 0 && info->err->msg_code == JWRN_JPEG_EOF) error->truncated = true;
}

// Runs `step` (libjpeg calls on buffers owned outside it: nothing to destroy in its frame) under
// `error`'s jump: false where libjpeg failed, with error.message.
template <typename Step>
bool JpegTry(JpegError& error, const Step& step) {
  if (setjmp(error.jump)) return false;
  step();
  return true;
}

absl::StatusOr<at::Tensor> DecodeJpeg(absl::string_view bytes, absl::string_view name) {
  jpeg_decompress_struct info;
  JpegError error;
  info.err = jpeg_std_error(&error.manager);
  error.manager.error_exit = JpegFail;
  error.manager.emit_message = JpegWarn;
  jpeg_create_decompress(&info);
  struct Destroy {
    jpeg_decompress_struct* info;
    ~Destroy() { jpeg_destroy_decompress(info); }
  } destroy{&info};
  auto corrupt = [&] { return Bad(name, absl::StrCat("corrupt JPEG (", error.message, ")")); };
  if (!JpegTry(error, [&] {
        jpeg_mem_src(&info, reinterpret_cast<const unsigned char*>(bytes.data()),
                     static_cast<unsigned long>(bytes.size()));
        jpeg_read_header(&info, TRUE);
      })) {
    return corrupt();
  }
  if (absl::Status size = CheckSize(name, info.image_width, info.image_height); !size.ok()) {
    return size;
  }
  if (info.jpeg_color_space == JCS_CMYK || info.jpeg_color_space == JCS_YCCK) {
    return Bad(name, "a CMYK JPEG (PIL converts its inks with its own formula): not supported");
  }
  // PIL's settings: libjpeg's defaults (integer IDCT, fancy upsampling), RGB out.
  info.out_color_space = JCS_RGB;
  if (!JpegTry(error, [&] { jpeg_start_decompress(&info); })) return corrupt();
  at::Tensor pixels = at::empty(
      {static_cast<int64_t>(info.output_height), static_cast<int64_t>(info.output_width), 3},
      at::kByte);
  uint8_t* data = pixels.data_ptr<uint8_t>();
  const size_t stride = static_cast<size_t>(info.output_width) * 3;
  if (!JpegTry(error, [&] {
        while (info.output_scanline < info.output_height && !error.truncated) {
          JSAMPROW row = data + static_cast<size_t>(info.output_scanline) * stride;
          jpeg_read_scanlines(&info, &row, 1);
        }
        if (!error.truncated) jpeg_finish_decompress(&info);
      })) {
    return corrupt();
  }
  if (error.truncated) return Bad(name, "the JPEG data ends early (a truncated file)");
  return pixels;
}

// ---- PNG (libpng 1.6) ---------------------------------------------------------------------------

struct PngSource {
  const unsigned char* data;
  size_t size;
  size_t offset = 0;
};

struct PngError {
  char message[256] = "";
};

[[noreturn]] void PngFail(png_structp png, png_const_charp message) {
  auto* error = static_cast<PngError*>(png_get_error_ptr(png));
  std::snprintf(error->message, sizeof(error->message), "%s", message);
  png_longjmp(png, 1);
}

void PngWarn(png_structp, png_const_charp) {}

void PngRead(png_structp png, png_bytep out, png_size_t length) {
  auto* source = static_cast<PngSource*>(png_get_io_ptr(png));
  if (length > source->size - source->offset) png_error(png, "the file ends early (truncated)");
  std::memcpy(out, source->data + source->offset, length);
  source->offset += length;
}

// Runs `step` (libpng calls on buffers owned outside it) under `png`'s jump: false where libpng
// failed, with the error's message in its error pointer.
template <typename Step>
bool PngTry(png_structp png, const Step& step) {
  if (setjmp(png_jmpbuf(png))) return false;
  step();
  return true;
}

absl::StatusOr<at::Tensor> DecodePng(absl::string_view bytes, absl::string_view name) {
  // The size from the header (IHDR comes first), checked before libpng reads further.
  if (bytes.size() >= 24 && bytes.substr(12, 4) == "IHDR") {
    auto be32 = [&](size_t at) {
      int64_t v = 0;
      for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
      return v;
    };
    if (absl::Status size = CheckSize(name, be32(16), be32(20)); !size.ok()) return size;
  }
  PngError error;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &error, PngFail, PngWarn);
  if (png == nullptr) return absl::ResourceExhaustedError("libpng: no memory for a reader");
  png_infop info = png_create_info_struct(png);
  struct Destroy {
    png_structp* png;
    png_infop* info;
    ~Destroy() { png_destroy_read_struct(png, info, nullptr); }
  } destroy{&png, &info};
  if (info == nullptr) return absl::ResourceExhaustedError("libpng: no memory for a header");
  auto corrupt = [&] { return Bad(name, absl::StrCat("corrupt PNG (", error.message, ")")); };
  PngSource source{reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()};
  if (!PngTry(png, [&] {
        png_set_read_fn(png, &source, PngRead);
        png_read_info(png, info);
      })) {
    return corrupt();
  }
  const int64_t width = png_get_image_width(png, info), height = png_get_image_height(png, info);
  if (absl::Status size = CheckSize(name, width, height); !size.ok()) return size;
  const int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  if (depth == 16 && color == PNG_COLOR_TYPE_GRAY_ALPHA) {
    return Bad(name, "a 16-bit grey PNG with alpha: not supported");
  }
  // PIL's convert("RGB"): palettes looked up (transparency ignored), low-depth grey scaled to 8
  // bits, grey replicated, alpha dropped, 16-bit RGB cut to its high bytes.
  const bool grey16 = depth == 16 && color == PNG_COLOR_TYPE_GRAY;
  size_t row_bytes = 0;
  if (!PngTry(png, [&] {
        if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
        if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
        if (depth == 16 && !grey16) png_set_strip_16(png);
        if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
        if (grey16) png_set_swap(png);  // 16-bit samples in the host's (little-endian) order
        png_set_interlace_handling(png);
        png_read_update_info(png, info);
        row_bytes = png_get_rowbytes(png, info);
      })) {
    return corrupt();
  }
  std::vector<uint8_t> raw(row_bytes * static_cast<size_t>(height));
  std::vector<png_bytep> rows(static_cast<size_t>(height));
  for (int64_t y = 0; y < height; ++y) rows[y] = raw.data() + y * row_bytes;
  if (!PngTry(png, [&] {
        png_read_image(png, rows.data());
        png_read_end(png, nullptr);
      })) {
    return corrupt();
  }
  // Samples per pixel as read: 1 (grey) or 3 (RGB), plus an alpha channel libpng's palette
  // expansion adds for a tRNS chunk (dropped below).
  const size_t samples = png_get_channels(png, info);
  at::Tensor pixels = at::empty({height, width, 3}, at::kByte);
  uint8_t* out = pixels.data_ptr<uint8_t>();
  const int64_t n = width * height;
  if (grey16) {
    // PIL's "I;16" -> "RGB": clipped at 255.
    const auto* in = reinterpret_cast<const uint16_t*>(raw.data());
    for (int64_t i = 0; i < n; ++i) {
      out[3 * i] = out[3 * i + 1] = out[3 * i + 2] =
          static_cast<uint8_t>(std::min<int>(in[i], 255));
    }
  } else if (samples <= 2) {
    for (int64_t i = 0; i < n; ++i) {
      out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = raw[i * samples];
    }
  } else if (samples == 3) {
    std::memcpy(out, raw.data(), static_cast<size_t>(n) * 3);
  } else {
    for (int64_t i = 0; i < n; ++i) std::memcpy(out + 3 * i, raw.data() + i * samples, 3);
  }
  return pixels;
}

}  // namespace

absl::StatusOr<at::Tensor> DecodeImageRgb(absl::string_view bytes, absl::string_view name) {
  if (bytes.empty()) return Bad(name, "an empty file (0 bytes)");
  static constexpr unsigned char kJpeg[] = {0xFF, 0xD8, 0xFF};
  static constexpr unsigned char kPng[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (bytes.size() >= sizeof(kJpeg) && std::memcmp(bytes.data(), kJpeg, sizeof(kJpeg)) == 0) {
    return DecodeJpeg(bytes, name);
  }
  if (bytes.size() >= sizeof(kPng) && std::memcmp(bytes.data(), kPng, sizeof(kPng)) == 0) {
    return DecodePng(bytes, name);
  }
  std::string head;
  for (size_t i = 0; i < std::min<size_t>(bytes.size(), 8); ++i) {
    absl::StrAppendFormat(&head, "%02x", static_cast<unsigned char>(bytes[i]));
  }
  return Bad(name, absl::StrCat("neither JPEG nor PNG (it begins ", head, ")"));
}

absl::StatusOr<at::Tensor> ReadImageRgb(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  return DecodeImageRgb(*bytes, path);
}

}  // namespace kd
