// "text_file": UTF-8 text tokenized with a SentencePiece model when the dataset opens, its
// documents (separated by lines equal to `separator`: fortune-mod's "%" by default) each
// followed by the tokenizer's eos, then cut into windows as the documents mode of
// distill/data/token_dataset.h cuts a token file: no window crosses a document, a document's
// short last window padded (attention_mask 0, labels -100).
//
// The ids are held in memory (4 bytes each); for corpora larger than memory, tokenize once with
// //tools:tokenize and read its .bin files with "token_file".
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/kwargs.h"
#include "base/registry.h"
#include "base/status_macros.h"
#include "distill/data/dataset.h"
#include "distill/data/sentencepiece_tokenizer.h"
#include "distill/data/text_corpus.h"
#include "distill/data/token_dataset.h"

namespace kd {
namespace {

constexpr char kKey[] = "text_file";
// The most text a text_file reads: its ids take about 4/3 of it in memory.
constexpr int64_t kMaxTextFileBytes = int64_t{1} << 30;

absl::StatusOr<std::shared_ptr<Dataset>> MakeTextFile(const Kwargs& kwargs) {
  const std::string path = StringKwarg(kwargs, "path");
  const std::string tokenizer_path = StringKwarg(kwargs, "tokenizer");
  const std::string name = absl::StrCat(kKey, ": ", path);
  absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> tokenizer =
      SentencePieceTokenizer::Load(tokenizer_path);
  if (absl::IsNotFound(tokenizer.status())) {
    return absl::NotFoundError(
        absl::StrCat(kKey, ": no tokenizer model ", tokenizer_path,
                     "; make one with bazel run "
                     "//tools:tokenize -- --corpus=<text> --out_dir=<folder> (it writes "
                     "<folder>/tokenizer.model), or correct the kwarg tokenizer"));
  }
  KD_RETURN_IF_ERROR(WithContext(kKey, tokenizer.status()));
  const int64_t eos = (*tokenizer)->eos_id();
  if (eos < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kKey, ": the tokenizer ", tokenizer_path,
                     " has no eos piece to end documents with; "
                     "train one with eos (//tools:tokenize's models have </s>)"));
  }
  absl::StatusOr<std::string> text = ReadFile(path, kMaxTextFileBytes);
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(absl::StrCat(kKey, ": no file ", path, "; correct the kwarg path"));
  }
  KD_RETURN_IF_ERROR(WithContext(kKey, text.status()));

  std::vector<uint32_t> ids;
  for (const std::string& document : SplitSeparatedText(*text, StringKwarg(kwargs, "separator"))) {
    const std::vector<int> encoded = (*tokenizer)->Encode(document);
    ids.insert(ids.end(), encoded.begin(), encoded.end());
    ids.push_back(static_cast<uint32_t>(eos));
  }
  if (ids.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": holds no documents (no text between its \"",
                     StringKwarg(kwargs, "separator"), "\" lines); give a file with text"));
  }
  const TokenWindowOptions options = {.block_size = IntKwarg(kwargs, "block_size"),
                                      .vocab_size = (*tokenizer)->vocab_size(),
                                      .eos_id = eos,
                                      .pad_id = IntKwarg(kwargs, "pad_id")};
  return MakeTokenDataset(std::move(ids), options, name);
}

KD_REGISTER(
    DatasetRegistry(), kKey, MakeTextFile,
    {{.name = "path", .type = KwargType::kString, .doc = "the UTF-8 text file", .required = true},
     {.name = "tokenizer",
      .type = KwargType::kString,
      .doc = "the SentencePiece model (.model; //tools:tokenize writes tokenizer.model)",
      .required = true},
     {.name = "block_size",
      .type = KwargType::kInteger,
      .doc = "tokens per sample (the model's context)",
      .min = 2,
      .max = 1 << 24,
      .required = true},
     {.name = "separator",
      .type = KwargType::kString,
      .doc = "the line that separates documents (fortune-mod's files: %)",
      .default_value = "%"},
     {.name = "pad_id",
      .type = KwargType::kInteger,
      .doc = "the id padding a document's last window (-1: the tokenizer's eos)",
      .default_value = -1,
      .min = -1}});

}  // namespace
}  // namespace kd
