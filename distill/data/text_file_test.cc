// "text_file": text through the committed SentencePiece model (its encoding is held to
// Python's by sentencepiece_test), cut as token_file's documents.
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "distill/data/dataset.h"
#include "distill/data/sentencepiece_tokenizer.h"
#include "distill/data/token_dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::HasSubstr;

const std::string& ModelPath() {
  static const std::string* const path =
      new std::string(test::RunfilePath("tests/testdata/sentencepiece/fortunes_bpe1024.model"));
  return *path;
}

std::string WriteText(const std::string& name, const std::string& text) {
  const std::string path = test::TempPath(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// The windows of `documents` as the documents mode cuts them: each document's ids and eos, in
// windows of `block`, the last padded with `pad` (-100 labels, mask 0).
struct Expected {
  std::vector<std::vector<int64_t>> ids, labels, mask;
};
Expected Windows(const SentencePieceTokenizer& t, const std::vector<std::string>& documents,
                 int64_t block, int64_t pad) {
  Expected out;
  for (const std::string& document : documents) {
    std::vector<int> ids = t.Encode(document);
    ids.push_back(static_cast<int>(t.eos_id()));
    for (size_t start = 0; start < ids.size(); start += block) {
      std::vector<int64_t> w, l, m;
      for (int64_t i = 0; i < block; ++i) {
        const bool real = start + i < ids.size();
        w.push_back(real ? ids[start + i] : pad);
        l.push_back(real ? ids[start + i] : kIgnoreIndex);
        m.push_back(real ? 1 : 0);
      }
      out.ids.push_back(w);
      out.labels.push_back(l);
      out.mask.push_back(m);
    }
  }
  return out;
}

std::vector<std::vector<int64_t>> Rows(const at::Tensor& t) {
  std::vector<std::vector<int64_t>> rows;
  for (int64_t r = 0; r < t.size(0); ++r) {
    const at::Tensor row = t[r].contiguous();
    rows.emplace_back(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
  }
  return rows;
}

TEST(TextFileTest, DocumentsTokenizedWithEosAndCutIntoPaddedWindows) {
  const std::vector<std::string> documents = {
      "A day for firm decisions!!!!!  Or is it?", "Short.",
      "A long-forgotten loved one will appear soon.\n\nBuy the negatives at any price."};
  const std::string path = WriteText(
      "fortunes.txt", documents[0] + "\n%\n" + documents[1] + "\n%\n" + documents[2] + "\n%\n");
  absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> t =
      SentencePieceTokenizer::Load(ModelPath());
  ASSERT_THAT(t, IsOk());
  for (const int64_t pad : {int64_t{-1}, int64_t{0}}) {
    absl::StatusOr<std::shared_ptr<Dataset>> data = MakeDataset(
        "text_file",
        {{"path", path}, {"tokenizer", ModelPath()}, {"block_size", int64_t{8}}, {"pad_id", pad}});
    ASSERT_THAT(data, IsOk());
    EXPECT_EQ((*data)->num_classes(), 1024);
    EXPECT_EQ((*data)->NumTransforms(), 1);
    const Expected want = Windows(**t, documents, 8, pad < 0 ? (*t)->eos_id() : pad);
    ASSERT_EQ((*data)->size(), static_cast<int64_t>(want.ids.size()));
    const Batch batch = (*data)->Get(at::arange((*data)->size()), 0);
    EXPECT_EQ(Rows(batch.samples.toTensor()), want.ids);
    EXPECT_EQ(Rows(batch.targets.toTensor()), want.labels);
    const auto supp = c10::impl::toTypedDict<std::string, at::Tensor>(batch.supp.toGenericDict());
    EXPECT_EQ(Rows(supp.at(kAttentionMaskKey)), want.mask);
  }
}

TEST(TextFileTest, SeparatorKwarg) {
  const std::string path = WriteText("paragraphs.txt", "one\nparagraph\n\nanother\n");
  absl::StatusOr<std::shared_ptr<Dataset>> data = MakeDataset(
      "text_file",
      {{"path", path}, {"tokenizer", ModelPath()}, {"block_size", int64_t{64}}, {"separator", ""}});
  ASSERT_THAT(data, IsOk());
  EXPECT_EQ((*data)->size(), 2);  // two paragraphs, one window each
}

TEST(TextFileTest, Errors) {
  const std::string text = WriteText("some.txt", "text\n");
  const std::string missing_model = test::TempPath("none.model");
  EXPECT_THAT(
      MakeDataset("text_file",
                  {{"path", text}, {"tokenizer", missing_model}, {"block_size", int64_t{8}}}),
      StatusIs(absl::StatusCode::kNotFound,
               "text_file: no tokenizer model " + missing_model +
                   "; make one with bazel run //tools:tokenize -- --corpus=<text> "
                   "--out_dir=<folder> (it writes <folder>/tokenizer.model), or correct the "
                   "kwarg tokenizer"));
  const std::string missing_text = test::TempPath("none.txt");
  EXPECT_THAT(
      MakeDataset("text_file",
                  {{"path", missing_text}, {"tokenizer", ModelPath()}, {"block_size", int64_t{8}}}),
      StatusIs(absl::StatusCode::kNotFound,
               "text_file: no file " + missing_text + "; correct the kwarg path"));
  const std::string empty = WriteText("empty.txt", "%\n%\n");
  EXPECT_THAT(
      MakeDataset("text_file",
                  {{"path", empty}, {"tokenizer", ModelPath()}, {"block_size", int64_t{8}}}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "text_file: " + empty +
                   ": holds no documents (no text between its \"%\" lines); give a file with "
                   "text"));
  EXPECT_THAT(
      MakeDataset("text_file", {{"path", text}, {"tokenizer", text}, {"block_size", int64_t{8}}}),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("is not a SentencePiece model")));
  EXPECT_THAT(MakeDataset("text_file", {{"path", text},
                                        {"tokenizer", ModelPath()},
                                        {"block_size", int64_t{8}},
                                        {"pad_id", int64_t{1024}}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("pad_id must be in [0, vocab_size 1024) or -1; got 1024")));
}

}  // namespace
}  // namespace kd
