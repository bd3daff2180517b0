// The decoder against PIL (tests/testdata/make_image_fixtures.py: Pillow's
// Image.open(path).convert("RGB") of each file, the pinned venv's), and bad files.
#include "distill/data/image_codec.h"

#include <zlib.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include <ATen/ATen.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::HasSubstr;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

std::string Image(const std::string& file) { return test::FixturePath("images/" + file); }

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return out;
}

// Baseline, 4:4:4 and progressive JPEG, grey JPEG; PNG in RGB, RGBA, grey, grey + alpha, 1-bit,
// palette (with and without transparency), 16-bit RGB and 16-bit grey: byte for byte PIL's.
TEST(ImageCodecTest, DecodesAsPilConvertsToRgb) {
  std::ifstream in(Image("expected.json"));
  ASSERT_TRUE(in.good());
  const nlohmann::json expected = nlohmann::json::parse(in);
  ASSERT_EQ(expected.size(), 13u);
  for (const auto& [name, want] : expected.items()) {
    SCOPED_TRACE(name);
    absl::StatusOr<at::Tensor> rgb = ReadImageRgb(Image(want.at("file").get<std::string>()));
    ASSERT_THAT(rgb, IsOk());
    ASSERT_EQ(rgb->sizes(), at::IntArrayRef({want.at("height").get<int64_t>(),
                                             want.at("width").get<int64_t>(), 3}));
    const std::string bytes = Unhex(want.at("rgb").get<std::string>());
    ASSERT_EQ(static_cast<int64_t>(bytes.size()), rgb->numel());
    const auto* got = rgb->data_ptr<uint8_t>();
    int64_t differ = 0;
    for (int64_t i = 0; i < rgb->numel(); ++i) {
      differ += got[i] != static_cast<uint8_t>(bytes[i]);
    }
    EXPECT_EQ(differ, 0) << "bytes differing from PIL's";
  }
}

// A PNG header of `width` x `height` (8-bit RGB) and nothing after it.
std::string PngHeader(uint32_t width, uint32_t height) {
  std::string ihdr = "IHDR";
  for (uint32_t v : {width, height}) {
    for (int shift = 24; shift >= 0; shift -= 8) ihdr += static_cast<char>((v >> shift) & 0xFF);
  }
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(ihdr.data()), ihdr.size());
  std::string out("\x89PNG\r\n\x1a\n", 8);
  out += std::string("\x00\x00\x00\x0d", 4) + ihdr;
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((crc >> shift) & 0xFF);
  return out;
}

TEST(ImageCodecTest, BadFilesAreNamedErrors) {
  EXPECT_THAT(DecodeImageRgb("", "a.jpg"), StatusIs(absl::StatusCode::kInvalidArgument,
                                                    HasSubstr("image a.jpg: an empty file")));
  EXPECT_THAT(DecodeImageRgb("GIF89a....", "b.gif"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("image b.gif: neither JPEG nor PNG (it begins 474946383961")));
  const std::string jpeg = Slurp(Image("rgb_420.jpg"));
  EXPECT_THAT(DecodeImageRgb(jpeg.substr(0, jpeg.size() - 200), "cut.jpg"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("image cut.jpg: the JPEG data ends early")));
  EXPECT_THAT(
      DecodeImageRgb(jpeg.substr(0, 40), "header.jpg"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("image header.jpg: corrupt JPEG")));
  // The frame header (SOF0) claiming 65500 x 65500 pixels: refused before decoding.
  std::string huge = jpeg;
  const size_t sof = huge.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  for (size_t at : {sof + 5, sof + 7}) {
    huge[at] = '\xFF';
    huge[at + 1] = '\xDC';
  }
  EXPECT_THAT(DecodeImageRgb(huge, "bomb.jpg"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("image bomb.jpg: 65500 x 65500 pixels is more than 178956970")));
  EXPECT_THAT(DecodeImageRgb(PngHeader(65536, 65536), "bomb.png"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("image bomb.png: 65536 x 65536 pixels is more than")));
  const std::string png = Slurp(Image("rgb8.png"));
  EXPECT_THAT(
      DecodeImageRgb(png.substr(0, png.size() - 30), "cut.png"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("image cut.png: corrupt PNG")));
  std::string flipped = png;
  flipped[png.find("IDAT") + 10] ^= 0x55;
  EXPECT_THAT(
      DecodeImageRgb(flipped, "flipped.png"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("image flipped.png: corrupt PNG")));
  EXPECT_THAT(ReadImageRgb("/nonexistent/x.png"), StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace kd
