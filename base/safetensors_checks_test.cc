// Every claim of a safetensors header is checked before a tensor is made: bad files built byte
// by byte, each refused with its own message.
#include <cstdint>
#include <string>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "base/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::HasSubstr;

std::string Le64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

// A file of `header` (unpadded) and `data`.
std::string File(const std::string& header, const std::string& data = "") {
  return Le64(header.size()) + header + data;
}

// A header of one F32 tensor "w" with `shape` and `offsets` (JSON text).
std::string OneTensor(const std::string& shape, const std::string& offsets,
                      const std::string& dtype = "F32") {
  return absl::StrCat(R"({"w":{"dtype":")", dtype, R"(","shape":)", shape, R"(,"data_offsets":)",
                      offsets, "}}");
}

absl::Status Parse(const std::string& bytes) {
  return ParseSafetensors(bytes, "bad.safetensors").status();
}

TEST(SafetensorsChecksTest, AGoodFileParses) {
  // A zero-sized tensor between two others, metadata null, keys in any order, trailing spaces.
  const std::string header =
      R"({"b":{"shape":[2],"dtype":"I16","data_offsets":[4,8]},"__metadata__":null,)"
      R"("z":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]},)"
      R"("a":{"dtype":"U8","shape":[2,2],"data_offsets":[0,4]}}   )";
  absl::StatusOr<SafetensorsContents> file =
      ParseSafetensors(File(header, std::string("\1\2\3\4\5\0\6\0", 8)), "good");
  ASSERT_THAT(file, IsOk());
  ASSERT_EQ(file->tensors.size(), 3u);
  EXPECT_EQ(file->tensors[0].first, "a");
  EXPECT_TRUE(
      at::equal(file->tensors[0].second, at::tensor({1, 2, 3, 4}, at::kByte).reshape({2, 2})));
  EXPECT_EQ(file->tensors[1].first, "z");
  EXPECT_EQ(file->tensors[1].second.sizes(), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(file->tensors[2].first, "b");
  EXPECT_TRUE(at::equal(file->tensors[2].second, at::tensor({5, 6}, at::kShort)));
}

TEST(SafetensorsChecksTest, HeaderLength) {
  EXPECT_THAT(Parse(Le64(100'000'001) + "{}"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "bad.safetensors: its first 8 bytes give a header of 100000001 bytes, more "
                       "than the 100000000 safetensors allows: not a safetensors file"));
  EXPECT_THAT(Parse(Le64(~uint64_t{0}) + "{}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a safetensors file")));
  EXPECT_THAT(Parse(Le64(10) + "{}"),
              StatusIs(absl::StatusCode::kDataLoss,
                       "bad.safetensors: its first 8 bytes give a header of 10 bytes, but only 2 "
                       "follow: the file is cut short (or not a safetensors file); download or "
                       "save it again"));
}

TEST(SafetensorsChecksTest, HeaderMustBeAJsonObject) {
  EXPECT_THAT(Parse(File("{\"w\":")), StatusIs(absl::StatusCode::kInvalidArgument,
                                               HasSubstr("bad.safetensors: the header is not JSON: "
                                                         "[json.exception.parse_error.101]")));
  EXPECT_THAT(Parse(File("")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the header is not JSON")));
  EXPECT_THAT(Parse(File("[1,2]")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "bad.safetensors: the header is JSON but not an object: [1,2]; not a "
                       "safetensors file"));
  EXPECT_THAT(Parse(File(R"({"w":[1]})")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "bad.safetensors: tensor \"w\": its entry must be an object with "
                       "\"dtype\", \"shape\" and \"data_offsets\", not [1]; the header is not a "
                       "safetensors header"));
  EXPECT_THAT(Parse(File(R"({"w":{"dtype":"F32","shape":[]}})")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("its entry must be")));
}

TEST(SafetensorsChecksTest, UnknownDtypeListsTheKnownOnes) {
  EXPECT_THAT(Parse(File(OneTensor("[1]", "[0,4]", "F8"), "abcd")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "bad.safetensors: tensor \"w\": unknown dtype \"F8\"; the dtypes libkd "
                       "reads are BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, "
                       "F32, C64, F64, I64, U64"));
}

TEST(SafetensorsChecksTest, ShapeMustBeNonNegativeIntegers) {
  for (const char* shape : {"[2,-1]", "[1.5]", "3", "[true]", "[\"2\"]", "[9223372036854775808]"}) {
    SCOPED_TRACE(shape);
    EXPECT_THAT(Parse(File(OneTensor(shape, "[0,0]"))),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         absl::StrCat("bad.safetensors: tensor \"w\": \"shape\" must be a list of "
                                      "non-negative integers, not ",
                                      shape)));
  }
  // Beyond uint64, JSON's number is a double.
  EXPECT_THAT(Parse(File(OneTensor("[99999999999999999999]", "[0,0]"))),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not [1e+20]")));
  EXPECT_THAT(Parse(File(OneTensor("[4294967296,4294967296]", "[0,0]"))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "bad.safetensors: tensor \"w\": shape [4294967296,4294967296] of F32 holds "
                       "more than 2^63 bytes"));
  // The non-zero dims count even when another is zero: libtorch multiplies them too.
  EXPECT_THAT(Parse(File(OneTensor("[0,4294967296,4294967296]", "[0,0]"))),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("more than 2^63 bytes")));
  std::string many = "[1";
  for (int i = 1; i < 64; ++i) many += ",1";
  EXPECT_THAT(Parse(File(OneTensor(many + "]", "[0,4]"), "abcd")), IsOk());
  many += ",1";
  EXPECT_THAT(Parse(File(OneTensor(many + "]", "[0,4]"), "abcd")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "bad.safetensors: tensor \"w\": its shape has 65 dims; libkd reads at "
                       "most 64"));
}

TEST(SafetensorsChecksTest, DataOffsetsMustBeTwoIncreasingIntegers) {
  for (const char* offsets : {"[4]", "[0,4,8]", "[4,0]", "[-4,0]", "[0,4.0]", "\"0,4\""}) {
    SCOPED_TRACE(offsets);
    EXPECT_THAT(Parse(File(OneTensor("[1]", offsets), "abcd")),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         absl::StrCat("bad.safetensors: tensor \"w\": \"data_offsets\" must be two "
                                      "integers [begin, end] with 0 <= begin <= end, not ",
                                      offsets)));
  }
  EXPECT_THAT(Parse(File(OneTensor("[1]", "[0,18446744073709551616]"), "abcd")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("with 0 <= begin <= end, not [0,1.8446744073709552e+19]")));
}

TEST(SafetensorsChecksTest, DataOffsetsMustFitTheBufferAndTheShape) {
  EXPECT_THAT(Parse(File(OneTensor("[2]", "[0,8]"), "abcd")),
              StatusIs(absl::StatusCode::kDataLoss,
                       "bad.safetensors: tensor \"w\": data_offsets [0,8] end past the data "
                       "buffer's 4 bytes: the file is cut short or its header is wrong; download "
                       "or save it again"));
  EXPECT_THAT(Parse(File(OneTensor("[3]", "[0,8]"), "abcdefgh")),
              StatusIs(absl::StatusCode::kDataLoss,
                       "bad.safetensors: tensor \"w\": data_offsets [0,8] hold 8 bytes but F32 of "
                       "shape [3] needs 12; the header is wrong: download or save the file "
                       "again"));
}

TEST(SafetensorsChecksTest, TensorsMustCoverTheBufferExactly) {
  const std::string two = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  EXPECT_THAT(Parse(File(two, std::string(12, 'x'))),
              StatusIs(absl::StatusCode::kDataLoss,
                       "bad.safetensors: tensors \"a\" [0, 8) and \"b\" [4, 12) overlap; the "
                       "header is wrong: download or save the file again"));
  // Two names over the same bytes overlap too.
  const std::string same = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  EXPECT_THAT(Parse(File(same, "abcd")),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("overlap")));
  const std::string hole = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  EXPECT_THAT(Parse(File(hole, std::string(12, 'x'))),
              StatusIs(absl::StatusCode::kDataLoss,
                       "bad.safetensors: bytes [4, 8) of the data buffer belong to no tensor "
                       "(before \"b\"); safetensors requires the tensors to cover the buffer "
                       "without holes: download or save the file again"));
  EXPECT_THAT(Parse(File(OneTensor("[1]", "[0,4]"), "abcdEXTRA")),
              StatusIs(absl::StatusCode::kDataLoss,
                       "bad.safetensors: the last 5 bytes of the data buffer belong to no tensor; "
                       "safetensors requires the tensors to cover the buffer without holes: "
                       "download or save the file again"));
  EXPECT_THAT(Parse(File(OneTensor("[1]", "[4,8]"), "abcdefgh")),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("bytes [0, 4) of the data buffer")));
}

TEST(SafetensorsChecksTest, NamesAppearOnce) {
  const std::string twice = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                            R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_THAT(Parse(File(twice, std::string(8, 'x'))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "bad.safetensors: tensor \"w\" is in the header twice; a name may appear "
                       "once: save the file again"));
  const std::string key_twice =
      R"({"w":{"dtype":"F32","dtype":"I32","shape":[1],"data_offsets":[0,4]}})";
  EXPECT_THAT(Parse(File(key_twice, "abcd")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "bad.safetensors: key \"dtype\" is twice in one object of the header; save "
                       "the file again"));
}

TEST(SafetensorsChecksTest, MetadataIsStrings) {
  EXPECT_THAT(Parse(File(R"({"__metadata__":{"format":"pt","n":3}})")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "bad.safetensors: \"__metadata__\" must map strings to strings, but \"n\" "
                       "is 3; write the value as a string"));
  EXPECT_THAT(Parse(File(R"({"__metadata__":["pt"]})")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "bad.safetensors: \"__metadata__\" must be an object of strings, not "
                       "[\"pt\"]"));
}

TEST(SafetensorsChecksTest, BoolBytesAreZeroOrOne) {
  EXPECT_THAT(Parse(File(OneTensor("[3]", "[0,3]", "BOOL"), std::string("\1\0\2", 3))),
              StatusIs(absl::StatusCode::kDataLoss,
                       "bad.safetensors: tensor \"w\": BOOL element 2 is byte 2, not 0 or 1; the "
                       "file is damaged: download or save it again"));
}

TEST(SafetensorsChecksTest, NamesInMessagesStayOnOneLine) {
  EXPECT_THAT(Parse(File(R"({"a\nb":{"dtype":"F7","shape":[],"data_offsets":[0,4]}})", "abcd")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor \"a\\nb\": unknown dtype \"F7\"")));
}

}  // namespace
}  // namespace kd
