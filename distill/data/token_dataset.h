// Token data for causal language models: a sequence of token ids cut into windows of
// `block_size` tokens, one window a sample. Registered datasets built on it: "token_file" (a
// flat binary file of ids, memory-mapped; this file's .cc) and "text_file" (text through a
// SentencePiece model, text_file.cc).
//
//   KD_ASSIGN_OR_RETURN(std::shared_ptr<kd::Dataset> train,
//                       kd::MakeDataset("token_file", {{"path", "data/train.bin"},
//                                                      {"block_size", int64_t{256}},
//                                                      {"vocab_size", int64_t{4096}}}));
//   kd::Batch batch = train->Get(at::arange(8), /*seed=*/0);
//   // batch.samples: input_ids int64 (8, 256); batch.targets: labels int64 (8, 256);
//   // batch.supp: {"indices": int64 (8), "attention_mask": int64 (8, 256)}.
//
// Labels follow Hugging Face's convention (transformers' run_clm.py and its causal-LM losses,
// which silverspoon-kd's users feed): `labels` is aligned with `input_ids`, equal to it where
// a token is to be predicted and kIgnoreIndex (-100, PyTorch's cross_entropy default) where
// not; the loss (or perplexity) shifts: logits at position t are scored against labels[t + 1].
// So a window of T tokens gives T - 1 predictions, and no label leaks across windows.
//
// Two ways to cut:
// - Flat (eos_id < 0): the ids as one stream, as run_clm.py's group_texts and nanoGPT read
//   train.bin: window i is ids[i * T, (i + 1) * T); the tail of fewer than T ids is dropped.
//   attention_mask is all ones, labels == input_ids.
// - Documents (eos_id >= 0): a document ends with the eos id (included; a last document
//   without one ends with the file). No window crosses a document boundary: each document is
//   cut into windows of T from its start, and a short last window is padded with pad_id,
//   attention_mask 0 and labels -100 on the padding. The eos is a label (the model learns to
//   end a document); what follows it belongs to another window, so it is never predicted from
//   this document's context.
//
// Samples carry no random transforms (NumTransforms() 1): a batch is a function of its indices,
// so the exact teacher cache keys on the window index alone. num_classes() is the vocabulary
// size; every id is checked against it when the dataset opens.
//
// Errors (one line each, naming the file and the fix): NotFound for a missing file, DataLoss
// for a size that is not a whole number of ids, InvalidArgument for a file shorter than one
// window, an id at or above vocab_size (its position and value), and bad options.
#ifndef LIBKD_DISTILL_DATA_TOKEN_DATASET_H_
#define LIBKD_DISTILL_DATA_TOKEN_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "distill/data/dataset.h"

namespace kd {

// The label of a position that is not scored: Hugging Face's and torch.nn.CrossEntropyLoss's
// default ignore_index.
inline constexpr int64_t kIgnoreIndex = -100;

// The supplementary dict's key of the attention mask (int64 (B, T): 1 on tokens, 0 on padding).
inline constexpr char kAttentionMaskKey[] = "attention_mask";

// How token ids become samples (see the top of this file).
struct TokenWindowOptions {
  // Tokens per window (the model's context); >= 2 (one token has nothing to predict).
  int64_t block_size = 0;
  // Every id must be below it; num_classes(). >= 1.
  int64_t vocab_size = 0;
  // The id that ends a document; >= 0 cuts by documents, -1 (default) reads one flat stream.
  int64_t eos_id = -1;
  // The id of padding in documents mode (its labels are -100 and its mask 0, so its value only
  // needs to be a valid embedding row); -1 (default): eos_id.
  int64_t pad_id = -1;
};

// The width of the ids of a token file, each little-endian.
enum class TokenDtype { kUInt16, kUInt32 };

// "uint16" / "uint32": the names the kwarg `dtype` and meta.json use.
absl::string_view TokenDtypeName(TokenDtype dtype);

// The token file at `path` (ids of `dtype`, no header: nanoGPT's train.bin, Megatron-style
// flat files, //tools:tokenize's output), memory-mapped for the dataset's lifetime (the file
// must not change meanwhile) and scanned once to check the ids and find the documents.
absl::StatusOr<std::shared_ptr<Dataset>> OpenTokenFile(const std::string& path, TokenDtype dtype,
                                                       const TokenWindowOptions& options);

// The same over ids held in memory (tokenized text); `name` says where they came from in
// error messages ("text_file: corpus.txt").
absl::StatusOr<std::shared_ptr<Dataset>> MakeTokenDataset(std::vector<uint32_t> ids,
                                                          const TokenWindowOptions& options,
                                                          absl::string_view name);

}  // namespace kd

#endif  // LIBKD_DISTILL_DATA_TOKEN_DATASET_H_
