// tokenize: token data for causal LMs from a text corpus. Reads documents (fortune-mod's files:
// text separated by "%" lines), splits them by document into train / validation / test with a
// fixed seed, trains a SentencePiece model on the train split (SentencePiece's trainer, Debian's
// spm_train, with Llama's settings: BPE, byte fallback, no normalization; see
// distill/data/sentencepiece_trainer.h), and writes into --out_dir:
//   tokenizer.model            the SentencePiece model
//   train.bin val.bin test.bin the ids of each split's documents, each followed by eos: uint16
//                              little-endian (uint32 when vocab_size > 65536), no header: the
//                              "token_file" dataset's and nanoGPT's layout
//   meta.json                  vocab size, special ids, dtype, seed, and per split the
//                              documents, tokens (eos included) and UTF-8 bytes of text (for
//                              bits per byte: nats per token * tokens / (bytes * ln 2))
//
//   bazel run //tools:tokenize -- --corpus=/usr/share/games/fortunes --out_dir=data/fortunes
//       --vocab_size=4096 --seed=1   (one command line)
//
// It writes only into --out_dir (made if missing; a folder that holds files is refused without
// --overwrite; never through a symbolic link), each file atomically; the trainer's temporary
// files live in a folder of their own there while it runs.
// Exit codes: 0 written, 2 bad input (flags, a missing or empty corpus, a taken --out_dir), 1 a
// failure of the run itself (a full disk).
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "tools/token_corpus.h"
#include "tools/tool_util.h"

ABSL_FLAG(std::string, corpus, "",
          "The text: a folder of fortune-mod files (every file without an extension; Debian's "
          "fortunes package installs /usr/share/games/fortunes) or one text file, documents "
          "separated by --separator lines. Required.");
ABSL_FLAG(std::string, out_dir, "",
          "The folder to write tokenizer.model, train.bin, val.bin, test.bin and meta.json "
          "into; made if missing (its parent must exist). Required.");
ABSL_FLAG(int64_t, vocab_size, 4096,
          "Pieces in the tokenizer, its 3 special and 256 byte pieces included; ids are stored "
          "as uint16 up to 65536, uint32 above.");
ABSL_FLAG(int64_t, seed, 1,
          "Seed of the split by document (torch.utils.data.random_split's, reproducible from "
          "Python) and of the trainer.");
ABSL_FLAG(std::string, split, "0.9,0.05,0.05",
          "Fractions of the documents in train, validation and test, summing to 1.");
ABSL_FLAG(std::string, separator, "%", "The line that separates documents.");
ABSL_FLAG(bool, overwrite, false,
          "Write into an --out_dir that holds files (replacing this tool's files there).");

namespace kd {
namespace {

constexpr char kTool[] = "tokenize";

int Stop(const absl::Status& status) {
  std::cerr << kTool << ": " << TerminalSafe(status.message()) << std::endl;
  return ExitCodeOf(status);
}

absl::StatusOr<std::vector<double>> ParseSplit(const std::string& text) {
  std::vector<double> fractions;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    double f;
    if (!absl::SimpleAtod(part, &f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--split=", text, ": \"", part,
                       "\" is not a number; give three fractions, e.g. "
                       "0.9,0.05,0.05"));
    }
    fractions.push_back(f);
  }
  if (fractions.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("--split=", text, " has ", fractions.size(),
                     " fractions; give three (train, validation, test), e.g. 0.9,0.05,0.05"));
  }
  return fractions;
}

int Run() {
  const std::string corpus_flag = absl::GetFlag(FLAGS_corpus);
  const std::string out_flag = absl::GetFlag(FLAGS_out_dir);
  if (corpus_flag.empty()) return Fail(kTool, "--corpus is required (see --help)");
  if (out_flag.empty()) return Fail(kTool, "--out_dir is required (see --help)");
  const int64_t seed = absl::GetFlag(FLAGS_seed);
  if (seed < 0 || seed > int64_t{0xffffffff}) {
    return Fail(kTool, absl::StrCat("--seed must be in [0, 2^32); got ", seed));
  }
  absl::StatusOr<std::vector<double>> fractions = ParseSplit(absl::GetFlag(FLAGS_split));
  if (!fractions.ok()) return Stop(fractions.status());
  const TokenCorpusOptions options{.corpus = ResolveUserPath(corpus_flag),
                                   .out_dir = ResolveUserPath(out_flag),
                                   .vocab_size = absl::GetFlag(FLAGS_vocab_size),
                                   .seed = static_cast<uint32_t>(seed),
                                   .split = *fractions,
                                   .separator = absl::GetFlag(FLAGS_separator),
                                   .overwrite = absl::GetFlag(FLAGS_overwrite)};
  absl::StatusOr<TokenCorpusSummary> summary = WriteTokenCorpus(options);
  if (!summary.ok()) return Stop(summary.status());
  const auto& splits = summary->splits;
  std::cout << absl::StrFormat("corpus: %d documents, %d bytes of text\n", summary->documents,
                               splits[0].text_bytes + splits[1].text_bytes + splits[2].text_bytes);
  std::cout << absl::StrFormat("tokenizer: BPE, %d pieces (eos %d), trained in %.1f s\n",
                               summary->vocab_size, summary->eos_id, summary->train_seconds);
  for (int s = 0; s < 3; ++s) {
    std::cout << absl::StrFormat("%s.bin: %d documents, %d tokens, %d bytes of text\n",
                                 kTokenSplitNames[s], splits[s].documents, splits[s].tokens,
                                 splits[s].text_bytes);
  }
  std::cout << "wrote " << options.out_dir << "/{tokenizer.model, train.bin, val.bin, test.bin, "
            << "meta.json} (" << (summary->narrow ? "uint16" : "uint32") << " ids)\n";
  return 0;
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Trains a SentencePiece tokenizer on a text corpus's train split and writes the splits "
      "as token files.\n"
      "Usage: bazel run //tools:tokenize -- --corpus=/usr/share/games/fortunes "
      "--out_dir=DIR [--vocab_size=4096] [--seed=1] [--split=0.9,0.05,0.05] "
      "[--separator=%] [--overwrite]");
  kd::ParseFlagsOrExit(argc, argv, kd::kTool);
  return kd::FinishOutput(kd::kTool, kd::Run());
}
