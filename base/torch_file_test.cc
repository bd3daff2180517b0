#include "base/torch_file.h"

#include <unistd.h>

#include <cstdint>
#include <fstream>
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

// A file that is no zip archive is refused from its first bytes: a 3 GiB sparse file of zeros
// given as a checkpoint (a --resume's last.pt) was read whole first (3.7 GB resident).
TEST(TorchFileTest, ANonArchiveIsRefusedBeforeItIsRead) {
  const std::string path = TempFile("zeros.pt");
  {
    std::ofstream touch(path);
  }
  ASSERT_EQ(::truncate(path.c_str(), int64_t{3} << 30), 0);
  EXPECT_THAT(ReadTorchFile(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       path + ": not a zip archive (3221225472 bytes beginning 0x00), so neither "
                              "torch.jit.save nor torch.save wrote it"));
  ::unlink(path.c_str());
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
