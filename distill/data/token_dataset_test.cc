#include "distill/data/token_dataset.h"

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "distill/data/data_loader.h"
#include "distill/data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// `ids` written as a token file of `width` bytes per little-endian id; returns its path.
std::string WriteTokens(const std::string& name, const std::vector<uint32_t>& ids, int width = 2) {
  const std::string path = test::TempPath(name);
  std::string bytes;
  for (uint32_t id : ids) {
    for (int b = 0; b < width; ++b) bytes.push_back(static_cast<char>((id >> (8 * b)) & 0xff));
  }
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::shared_ptr<Dataset> Open(const Kwargs& kwargs) {
  absl::StatusOr<std::shared_ptr<Dataset>> dataset = MakeDataset("token_file", kwargs);
  EXPECT_THAT(dataset, IsOk());
  return dataset.ok() ? *dataset : nullptr;
}

std::vector<int64_t> Row(const c10::IValue& value, int64_t row) {
  const at::Tensor t = value.toTensor()[row].contiguous();
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}

at::Tensor Supp(const Batch& batch, const std::string& key) {
  return c10::impl::toTypedDict<std::string, at::Tensor>(batch.supp.toGenericDict()).at(key);
}

std::vector<int64_t> MaskRow(const Batch& batch, int64_t row) {
  return Row(Supp(batch, kAttentionMaskKey), row);
}

TEST(TokenFileTest, FlatWindowsBackToBackWithLabelsEqualToInputs) {
  // 11 ids, block_size 4: windows [0, 4) and [4, 8); the tail 8, 9, 10 is dropped.
  const std::string path = WriteTokens("flat.bin", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  std::shared_ptr<Dataset> data =
      Open({{"path", path}, {"block_size", int64_t{4}}, {"vocab_size", int64_t{11}}});
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(data->size(), 2);
  EXPECT_EQ(data->num_classes(), 11);
  EXPECT_EQ(data->NumTransforms(), 1);
  const Batch batch = data->Get(at::tensor({1, 0, 1}, at::kLong), /*seed=*/0);
  EXPECT_EQ(batch.samples.toTensor().scalar_type(), at::kLong);
  EXPECT_THAT(batch.samples.toTensor().sizes(), ElementsAre(3, 4));
  EXPECT_THAT(Row(batch.samples, 0), ElementsAre(4, 5, 6, 7));
  EXPECT_THAT(Row(batch.samples, 1), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(Row(batch.targets, 0), ElementsAre(4, 5, 6, 7));  // shifted by the loss
  EXPECT_THAT(Row(batch.targets, 2), ElementsAre(4, 5, 6, 7));
  EXPECT_THAT(MaskRow(batch, 1), ElementsAre(1, 1, 1, 1));
  EXPECT_TRUE(Supp(batch, "indices").equal(at::tensor({1, 0, 1}, at::kLong)));
}

TEST(TokenFileTest, Uint32Ids) {
  const std::string path = WriteTokens("wide.bin", {70000, 1, 99999, 65536}, /*width=*/4);
  std::shared_ptr<Dataset> data = Open({{"path", path},
                                        {"dtype", "uint32"},
                                        {"block_size", int64_t{2}},
                                        {"vocab_size", int64_t{100000}}});
  ASSERT_NE(data, nullptr);
  const Batch batch = data->Get(at::arange(2), 0);
  EXPECT_THAT(Row(batch.samples, 0), ElementsAre(70000, 1));
  EXPECT_THAT(Row(batch.samples, 1), ElementsAre(99999, 65536));
}

// Documents end with eos 1: [5 6 7 1] [8 1] [9 10 11 12 13 1], then [14 15] without an eos.
const std::vector<uint32_t> kDocuments = {5, 6, 7, 1, 8, 1, 9, 10, 11, 12, 13, 1, 14, 15};

TEST(TokenFileTest, DocumentsAreCutApartAndPadded) {
  const std::string path = WriteTokens("docs.bin", kDocuments);
  std::shared_ptr<Dataset> data = Open({{"path", path},
                                        {"block_size", int64_t{4}},
                                        {"vocab_size", int64_t{16}},
                                        {"eos_id", int64_t{1}}});
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(data->size(), 5);
  const Batch batch = data->Get(at::arange(5), 0);
  // The padding is eos (pad_id's default); its labels are -100 and its mask 0.
  EXPECT_THAT(Row(batch.samples, 0), ElementsAre(5, 6, 7, 1));
  EXPECT_THAT(Row(batch.targets, 0), ElementsAre(5, 6, 7, 1));
  EXPECT_THAT(MaskRow(batch, 0), ElementsAre(1, 1, 1, 1));
  EXPECT_THAT(Row(batch.samples, 1), ElementsAre(8, 1, 1, 1));
  EXPECT_THAT(Row(batch.targets, 1), ElementsAre(8, 1, -100, -100));
  EXPECT_THAT(MaskRow(batch, 1), ElementsAre(1, 1, 0, 0));
  EXPECT_THAT(Row(batch.samples, 2), ElementsAre(9, 10, 11, 12));
  EXPECT_THAT(Row(batch.targets, 2), ElementsAre(9, 10, 11, 12));
  EXPECT_THAT(Row(batch.samples, 3), ElementsAre(13, 1, 1, 1));
  EXPECT_THAT(Row(batch.targets, 3), ElementsAre(13, 1, -100, -100));
  EXPECT_THAT(MaskRow(batch, 3), ElementsAre(1, 1, 0, 0));
  // The last document ends with the file.
  EXPECT_THAT(Row(batch.samples, 4), ElementsAre(14, 15, 1, 1));
  EXPECT_THAT(Row(batch.targets, 4), ElementsAre(14, 15, -100, -100));
}

TEST(TokenFileTest, PadIdAndOneTokenDocuments) {
  // Two eos in a row: a document of the eos alone.
  const std::string path = WriteTokens("pad.bin", {3, 1, 1, 4, 4, 4, 1});
  std::shared_ptr<Dataset> data = Open({{"path", path},
                                        {"block_size", int64_t{3}},
                                        {"vocab_size", int64_t{8}},
                                        {"eos_id", int64_t{1}},
                                        {"pad_id", int64_t{0}}});
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(data->size(), 4);
  const Batch batch = data->Get(at::arange(4), 0);
  EXPECT_THAT(Row(batch.samples, 0), ElementsAre(3, 1, 0));
  EXPECT_THAT(Row(batch.samples, 1), ElementsAre(1, 0, 0));
  EXPECT_THAT(Row(batch.targets, 1), ElementsAre(1, -100, -100));
  EXPECT_THAT(Row(batch.samples, 2), ElementsAre(4, 4, 4));
  EXPECT_THAT(Row(batch.samples, 3), ElementsAre(1, 0, 0));
  EXPECT_THAT(MaskRow(batch, 3), ElementsAre(1, 0, 0));
}

TEST(TokenFileTest, MakeTokenDatasetFromMemory) {
  absl::StatusOr<std::shared_ptr<Dataset>> data = MakeTokenDataset(
      {5, 6, 7, 1, 8, 1}, {.block_size = 3, .vocab_size = 9, .eos_id = 1}, "memory");
  ASSERT_THAT(data, IsOk());
  EXPECT_EQ((*data)->size(), 3);  // [5 6 7] [1 . .] [8 1 .]
  const Batch batch = (*data)->Get(at::arange(3), 0);
  EXPECT_THAT(Row(batch.samples, 1), ElementsAre(1, 1, 1));
  EXPECT_THAT(Row(batch.targets, 2), ElementsAre(8, 1, -100));
}

TEST(TokenFileTest, FileErrorsNameTheFileAndTheFix) {
  const std::string missing = test::TempPath("missing.bin");
  EXPECT_THAT(
      MakeDataset("token_file",
                  {{"path", missing}, {"block_size", int64_t{4}}, {"vocab_size", int64_t{8}}}),
      StatusIs(absl::StatusCode::kNotFound,
               "token_file: no file " + missing +
                   "; write one with bazel run //tools:tokenize -- --corpus=<text> "
                   "--out_dir=<folder> (its train.bin, val.bin, test.bin), or correct the "
                   "kwarg path"));

  std::string odd = test::TempPath("odd.bin");
  std::ofstream(odd, std::ios::binary) << std::string(7, '\0');
  EXPECT_THAT(OpenTokenFile(odd, TokenDtype::kUInt16, {.block_size = 2, .vocab_size = 8}),
              StatusIs(absl::StatusCode::kDataLoss,
                       "token_file: " + odd +
                           ": holds 7 bytes, not a whole number of 2-byte uint16 ids: the file "
                           "is cut short, or its ids are uint32 (give dtype \"uint32\")"));
  std::ofstream(odd, std::ios::binary) << std::string(6, '\0');
  EXPECT_THAT(OpenTokenFile(odd, TokenDtype::kUInt32, {.block_size = 2, .vocab_size = 8}),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("give dtype \"uint16\"")));

  const std::string short_file = WriteTokens("short.bin", {1, 2, 3});
  EXPECT_THAT(OpenTokenFile(short_file, TokenDtype::kUInt16, {.block_size = 4, .vocab_size = 8}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "token_file: " + short_file +
                           ": holds 3 tokens, fewer than one window of block_size 4; lower "
                           "block_size or give more data"));
  // Documents pad short ones: three tokens are one window.
  EXPECT_THAT(OpenTokenFile(short_file, TokenDtype::kUInt16,
                            {.block_size = 4, .vocab_size = 8, .eos_id = 3}),
              IsOk());

  const std::string empty = WriteTokens("empty.bin", {});
  EXPECT_THAT(
      OpenTokenFile(empty, TokenDtype::kUInt16, {.block_size = 4, .vocab_size = 8, .eos_id = 3}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("holds no tokens")));
}

TEST(TokenFileTest, IdsAtOrAboveTheVocabularyAreRefusedWithTheirPosition) {
  const std::string path = WriteTokens("big_id.bin", {1, 2, 3, 9, 12, 1});
  EXPECT_THAT(OpenTokenFile(path, TokenDtype::kUInt16, {.block_size = 2, .vocab_size = 9}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "token_file: " + path +
                           ": the id at position 3 is 9, not below vocab_size 9: give the "
                           "tokenizer's vocab_size (meta.json's), or the file's dtype if it is "
                           "not that of the kwarg"));
}

TEST(TokenFileTest, KwargsAreChecked) {
  const std::string path = WriteTokens("kwargs.bin", {1, 2, 3, 4});
  const Kwargs base = {{"path", path}, {"block_size", int64_t{2}}, {"vocab_size", int64_t{8}}};
  auto with = [&](const std::string& key, c10::IValue value) {
    Kwargs kwargs = base;
    kwargs[key] = std::move(value);
    return MakeDataset("token_file", kwargs);
  };
  EXPECT_THAT(with("dtype", "int16"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("dtype"), HasSubstr("uint16"))));
  EXPECT_THAT(with("block_size", int64_t{1}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(with("eos_id", int64_t{8}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("eos_id must be in [0, vocab_size 8) or -1; got 8")));
  EXPECT_THAT(with("pad_id", int64_t{0}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("pad_id pads the last window of a document: give eos_id")));
  EXPECT_THAT(MakeDataset("token_file", {{"path", path}, {"block_size", int64_t{2}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("vocab_size")));
}

TEST(TokenFileTest, SeededLoadersGiveTheSameBatchesAndResumeAnywhere) {
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < 200; ++i) ids.push_back(i % 7 == 6 ? 0 : 1 + i % 50);
  const std::string path = WriteTokens("loader.bin", ids);
  std::shared_ptr<Dataset> data = Open({{"path", path},
                                        {"block_size", int64_t{5}},
                                        {"vocab_size", int64_t{64}},
                                        {"eos_id", int64_t{0}}});
  ASSERT_NE(data, nullptr);
  const DataLoaderOptions options = {.batch_size = 4, .shuffle = true, .seed = 11};
  absl::StatusOr<DataLoader> a = DataLoader::Create(data, options);
  absl::StatusOr<DataLoader> b = DataLoader::Create(data, options);
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  a->SetEpoch(3);
  b->SetEpoch(3);
  int64_t i = 0;
  for (const Batch& batch : *a) {
    // A fresh loader's batch i (a resumed run) is the same batch.
    const Batch again = b->GetBatch(i++);
    EXPECT_TRUE(batch.samples.toTensor().equal(again.samples.toTensor()));
    EXPECT_TRUE(batch.targets.toTensor().equal(again.targets.toTensor()));
    EXPECT_TRUE(Supp(batch, kAttentionMaskKey).equal(Supp(again, kAttentionMaskKey)));
    EXPECT_TRUE(Supp(batch, "indices").equal(Supp(again, "indices")));
  }
  EXPECT_EQ(i, a->num_batches());
  b->SetEpoch(4);
  EXPECT_FALSE(Supp(a->GetBatch(0), "indices").equal(Supp(b->GetBatch(0), "indices")));
}

}  // namespace
}  // namespace kd
