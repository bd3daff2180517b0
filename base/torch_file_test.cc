#include "base/torch_file.h"

#include <string>

#include <ATen/ATen.h>
#include <ATen/core/Dict.h>

#include "base/file_util.h"
#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kd {
namespace {

using ::testing::HasSubstr;

std::string TempFile(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

TEST(TorchFileTest, RoundTripsNestedValues) {
  c10::impl::GenericDict inner(c10::StringType::get(), c10::AnyType::get());
  inner.insert("t", at::arange(6, at::kFloat).reshape({2, 3}));
  inner.insert("n", int64_t{7});
  c10::impl::GenericDict value(c10::StringType::get(), c10::AnyType::get());
  value.insert("inner", inner);
  value.insert("list", c10::List<int64_t>({1, 2, 3}));
  value.insert("pair", c10::ivalue::Tuple::create({at::ones({1}), std::string("x")}));
  const std::string path = TempFile("value.pt");
  ASSERT_THAT(WriteTorchFile(path, value), IsOk());
  absl::StatusOr<c10::IValue> back = ReadTorchFile(path);
  ASSERT_THAT(back, IsOk());
  const c10::impl::GenericDict dict = back->toGenericDict();
  const c10::impl::GenericDict got_inner = dict.at("inner").toGenericDict();
  EXPECT_TRUE(at::equal(got_inner.at("t").toTensor(), at::arange(6, at::kFloat).reshape({2, 3})));
  EXPECT_EQ(got_inner.at("n").toInt(), 7);
  EXPECT_EQ(dict.at("list").toList().size(), 3u);
  EXPECT_EQ(dict.at("pair").toTupleRef().elements()[1].toStringRef(), "x");
}

// The archive has no TorchScript type tags: torch::pickle_save's files carry the global
// torch.jit._pickle.restore_type_tag, which Python's weights_only torch.load refuses.
TEST(TorchFileTest, WritesNoTypeTags) {
  c10::Dict<std::string, at::Tensor> state;
  state.insert("w", at::zeros({2}));
  absl::StatusOr<std::string> bytes = EncodeTorchSave(c10::IValue(state));
  ASSERT_THAT(bytes, IsOk());
  EXPECT_THAT(*bytes, HasSubstr("data.pkl"));
  EXPECT_THAT(*bytes, ::testing::Not(HasSubstr("restore_type_tag")));
}

TEST(TorchFileTest, UnreadableFileNamesIt) {
  const std::string path = TempFile("junk.pt");
  ASSERT_THAT(WriteFileAtomically(path, "not a zip archive"), IsOk());
  EXPECT_THAT(ReadTorchFile(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(path + ": not a zip archive (17 bytes beginning 0x6e)")));
}

}  // namespace
}  // namespace kd
