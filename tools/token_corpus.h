// A text corpus made into token data for causal LMs, what //tools:tokenize writes and the LM
// job (`//tools:distill -- --job=lm`) makes first: the corpus's documents (fortune-mod's files,
// text separated by "%" lines) split by document into train / validation / test with a fixed
// seed, a SentencePiece tokenizer trained on the train split (distill/data/
// sentencepiece_trainer.h: Llama's settings), and in `out_dir`:
//   tokenizer.model            the SentencePiece model
//   train.bin val.bin test.bin the ids of each split's documents, each followed by eos: uint16
//                              little-endian (uint32 when vocab_size > 65536), no header: the
//                              "token_file" dataset's and nanoGPT's layout
//   meta.json                  vocab size, special ids, dtype, seed, and per split the
//                              documents, tokens (eos included) and UTF-8 bytes of text (for
//                              bits per byte: nats per token * tokens / (bytes * ln 2))
//
// It writes only into `out_dir` (made if missing; a folder that holds files is refused unless
// `overwrite`; never through a symbolic link; never among the corpus), each file atomically.
#ifndef LIBKD_TOOLS_TOKEN_CORPUS_H_
#define LIBKD_TOOLS_TOKEN_CORPUS_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kd {

struct TokenCorpusOptions {
  std::string corpus;   // a folder of fortune-mod files, or one text file
  std::string out_dir;  // made if missing (its parent must exist)
  // How messages name out_dir and corpus: the tool's flags, or the job's folder.
  std::string out_dir_name = "--out_dir";
  std::string corpus_name = "--corpus";
  int64_t vocab_size = 4096;  // in [260, 2^31]: 3 special and 256 byte pieces come first
  uint32_t seed = 1;          // of the split by document and of the trainer
  std::vector<double> split = {0.9, 0.05, 0.05};  // train, validation, test
  std::string separator = "%";
  bool overwrite = false;  // write into an out_dir that holds files
};

struct TokenCorpusSummary {
  struct Split {
    int64_t documents = 0, tokens = 0, text_bytes = 0;
  };
  int64_t documents = 0;  // in the corpus
  std::array<Split, 3> splits;
  int64_t vocab_size = 0, eos_id = 0;
  bool narrow = true;  // uint16 ids
  double train_seconds = 0;
};

// The split names, in order, as the files are named: "train", "val", "test".
inline constexpr std::array<const char*, 3> kTokenSplitNames = {"train", "val", "test"};

// Reads, splits, trains and writes as above. Errors: InvalidArgument for bad options, a corpus
// without documents, an out_dir that overlaps the corpus or is a link; NotFound for a missing
// corpus or out_dir parent; AlreadyExists for an out_dir that holds files (without
// `overwrite`); the trainer's errors (nothing is left behind in an out_dir it made); the
// writer's for a failed write.
absl::StatusOr<TokenCorpusSummary> WriteTokenCorpus(const TokenCorpusOptions& options);

}  // namespace kd

#endif  // LIBKD_TOOLS_TOKEN_CORPUS_H_
