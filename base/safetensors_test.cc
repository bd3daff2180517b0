#include "base/safetensors.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "base/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Pair;

constexpr char kTestdata[] = "tests/testdata/";

// A fresh folder for one test.
std::string TempFolder(const std::string& name) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
  return path;
}

std::vector<std::string> Names(const NamedTensors& tensors) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : tensors) names.push_back(name);
  return names;
}

bool SameBytes(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor ca = a.contiguous();
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() && b.is_contiguous() &&
         (ca.nbytes() == 0 || std::memcmp(ca.data_ptr(), b.data_ptr(), ca.nbytes()) == 0);
}

// The values make_safetensors_fixtures.py gives each dtype, as a function of the flat index i.
at::Tensor Formula(const std::string& name) {
  const at::Tensor i = at::arange(6, at::kDouble);
  const std::map<std::string, at::ScalarType> floats = {{"f64", at::kDouble},
                                                        {"f32", at::kFloat},
                                                        {"f16", at::kHalf},
                                                        {"bf16", at::kBFloat16},
                                                        {"f8_e4m3", at::kFloat8_e4m3fn},
                                                        {"f8_e5m2", at::kFloat8_e5m2}};
  const std::map<std::string, at::ScalarType> signed_ints = {
      {"i8", at::kChar}, {"i16", at::kShort}, {"i32", at::kInt}, {"i64", at::kLong}};
  const std::map<std::string, at::ScalarType> unsigned_ints = {
      {"u8", at::kByte}, {"u16", at::kUInt16}, {"u32", at::kUInt32}, {"u64", at::kUInt64}};
  at::Tensor t;
  if (floats.count(name)) t = ((i - 2.5) * 0.5).to(floats.at(name));
  if (signed_ints.count(name)) t = ((i - 3) * 7).to(signed_ints.at(name));
  if (unsigned_ints.count(name)) t = (i * 40 + 3).to(unsigned_ints.at(name));
  if (name == "c64") t = at::complex((i - 2.5) * 0.5, i).to(at::kComplexFloat);
  if (name == "bool") t = (at::arange(6) % 3).eq(0);
  if (name == "i64_big") return at::tensor({(int64_t{1} << 62) + 1, -(int64_t{1} << 62) - 3});
  if (name == "scalar") return at::scalar_tensor(3.5, at::kFloat);
  if (name == "empty") return at::zeros({0, 4}, at::kFloat);
  return t.reshape({2, 3});
}

// The dtypes' tensors in the reference writer's order: by alignment, then by name.
const std::vector<std::string>& PythonOrder() {
  static const std::vector<std::string> order = {
      "u64",  "i64", "i64_big", "f64", "c64",     "empty",   "f32", "scalar", "u32", "i32",
      "bf16", "f16", "u16",     "i16", "f8_e4m3", "f8_e5m2", "i8",  "u8",     "bool"};
  return order;
}

TEST(SafetensorsTest, ReadsPythonsFile) {
  absl::StatusOr<SafetensorsContents> file =
      ReadSafetensors(std::string(kTestdata) + "safetensors_python.safetensors");
  ASSERT_THAT(file, IsOk());
  EXPECT_THAT(file->metadata, ElementsAre(Pair("format", "pt")));
  EXPECT_THAT(Names(file->tensors), ElementsAreArray(PythonOrder()));
  for (const auto& [name, tensor] : file->tensors) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(tensor.device().is_cpu() && tensor.is_contiguous());
    EXPECT_TRUE(SameBytes(Formula(name), tensor));
  }
}

TEST(SafetensorsTest, RoundTripsEveryDtype) {
  NamedTensors tensors;
  for (const std::string& name : PythonOrder()) tensors.emplace_back(name, Formula(name));
  // Written contiguous, whatever the tensor's strides.
  tensors.emplace_back("transposed", at::arange(6, at::kFloat).reshape({2, 3}).t());
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "é \"x\"\n"}};
  const std::string path = TempFolder("round_trip") + "/all.safetensors";
  ASSERT_THAT(WriteSafetensors(path, tensors, metadata), IsOk());
  absl::StatusOr<SafetensorsContents> back = ReadSafetensors(path);
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->metadata, metadata);
  ASSERT_EQ(back->tensors.size(), tensors.size());
  std::map<std::string, at::Tensor> by_name(back->tensors.begin(), back->tensors.end());
  for (const auto& [name, tensor] : tensors) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(SameBytes(tensor, by_name.at(name)));
  }
}

// Python's save_file sorts by alignment then name and pads the header with spaces: the same
// tensors and metadata must give the same bytes, whatever order they are given in.
TEST(SafetensorsTest, WritesTheBytesPythonWrites) {
  const std::string fixture = std::string(kTestdata) + "safetensors_python.safetensors";
  absl::StatusOr<SafetensorsContents> file = ReadSafetensors(fixture);
  ASSERT_THAT(file, IsOk());
  NamedTensors reversed(file->tensors.rbegin(), file->tensors.rend());
  const std::string path = TempFolder("python_bytes") + "/same.safetensors";
  ASSERT_THAT(WriteSafetensors(path, reversed, {{"format", "pt"}}), IsOk());
  absl::StatusOr<std::string> ours = ReadFile(path);
  absl::StatusOr<std::string> theirs = ReadFile(fixture);
  ASSERT_THAT(ours, IsOk());
  ASSERT_THAT(theirs, IsOk());
  EXPECT_TRUE(*ours == *theirs);
}

TEST(SafetensorsTest, WritesAnEmptyFile) {
  const std::string path = TempFolder("empty") + "/none.safetensors";
  ASSERT_THAT(WriteSafetensors(path, {}), IsOk());
  // What Python's safetensors.torch.save({}) returns.
  EXPECT_THAT(ReadFile(path), IsOkAndHolds(std::string("\x08\0\0\0\0\0\0\0{}      ", 16)));
  absl::StatusOr<SafetensorsContents> back = ReadSafetensors(path);
  ASSERT_THAT(back, IsOk());
  EXPECT_TRUE(back->tensors.empty() && back->metadata.empty());
}

TEST(SafetensorsTest, RefusesWhatSafetensorsCannotHold) {
  const std::string path = TempFolder("refused") + "/x.safetensors";
  const at::Tensor t = at::zeros({2});
  EXPECT_THAT(WriteSafetensors(path, {{"a", t}, {"a", t}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       path + ": tensor \"a\": the name is given twice; give each tensor a name "
                              "of its own"));
  EXPECT_THAT(WriteSafetensors(path, {{"__metadata__", t}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the name is safetensors' key for the metadata")));
  EXPECT_THAT(WriteSafetensors(path, {{"u", at::Tensor()}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       path + ": tensor \"u\": is undefined; safetensors holds dense tensors: "
                              "give a dense tensor"));
  EXPECT_THAT(WriteSafetensors(path, {{"s", t.to_sparse()}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not dense")));
  EXPECT_THAT(WriteSafetensors(path, {{"c", at::zeros({2}, at::kComplexDouble)}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor \"c\": dtype ComplexDouble has no safetensors name; "
                                 "convert it to one of BOOL, U8, I8")));
  EXPECT_THAT(WriteSafetensors(path, {{"\xff", t}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not UTF-8 text")));
  EXPECT_THAT(WriteSafetensors(path, {{"t", t}}, {{"k", "\xc3"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not UTF-8 text")));
  EXPECT_FALSE(std::filesystem::exists(path));
}

// A failed write leaves what was there, and no partial or temporary file.
TEST(SafetensorsTest, FailedWritesLeaveNoPartialFile) {
  const std::string folder = TempFolder("atomic");
  const std::string path = folder + "/kept.safetensors";
  ASSERT_THAT(WriteSafetensors(path, {{"w", at::ones({3})}}), IsOk());
  absl::StatusOr<std::string> before = ReadFile(path);
  EXPECT_THAT(WriteSafetensors(path, {{"w", at::zeros({3})}, {"w", at::zeros({3})}}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ReadFile(path), IsOkAndHolds(*before));
  EXPECT_THAT(WriteSafetensors(folder + "/missing/x.safetensors", {{"w", at::ones({3})}}),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("/missing/x.safetensors: cannot write it: its folder")));
  EXPECT_THAT(WriteHfWeights(folder + "/missing", {{"w", at::ones({3})}}),
              StatusIs(absl::StatusCode::kNotFound,
                       folder + "/missing: no such folder; make it before writing the weights "
                                "into it"));
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    left.push_back(entry.path().filename().string());
  }
  EXPECT_THAT(left, ElementsAre("kept.safetensors"));
}

TEST(SafetensorsTest, UnreadableFilesAreNamed) {
  EXPECT_THAT(ReadSafetensors("/nonexistent/m.safetensors"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/m.safetensors")));
  const std::string folder = TempFolder("unreadable");
  EXPECT_THAT(ReadSafetensors(folder),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is a folder")));
  ASSERT_THAT(WriteFileAtomically(folder + "/cut.safetensors", std::string("\x40\0\0\0", 4)),
              IsOk());
  EXPECT_THAT(ReadSafetensors(folder + "/cut.safetensors"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       folder + "/cut.safetensors: is 4 bytes, too few for a safetensors file "
                                "(whose first 8 bytes give the length of its JSON header)"));
}

}  // namespace
}  // namespace kd
