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
#include <sys/stat.h>

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
#include "distill/data/sentencepiece_tokenizer.h"
#include "distill/data/sentencepiece_trainer.h"
#include "distill/data/text_corpus.h"
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
constexpr const char* kSplitNames[] = {"train", "val", "test"};
constexpr const char* kOutFiles[] = {"tokenizer.model", "train.bin", "val.bin", "test.bin",
                                     "meta.json"};

int Stop(const absl::Status& status) {
  std::cerr << kTool << ": " << TerminalSafe(status.message()) << std::endl;
  return ExitCodeOf(status);
}

// OK if --out_dir may be written: not a link, a folder or nothing yet (its parent existing),
// empty unless --overwrite, apart from the corpus.
absl::Status CheckOutDir(const std::string& out_dir, const std::string& corpus, bool overwrite) {
  KD_RETURN_IF_ERROR(WithContext("--out_dir", CheckNotInSystemFolder(out_dir)));
  if (IsWithinFolder(out_dir, corpus) || IsWithinFolder(corpus, out_dir)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--out_dir=", out_dir, " overlaps --corpus=", corpus,
                     "; the tool never writes among what it reads: give another --out_dir"));
  }
  struct stat st;
  if (::lstat(out_dir.c_str(), &st) != 0) {
    const std::string parent = std::filesystem::path(out_dir).parent_path().string();
    if (::stat(parent.empty() ? "." : parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::NotFoundError(absl::StrCat("--out_dir=", out_dir, ": its parent folder ", parent,
                                              " does not exist; make it first"));
    }
    return absl::OkStatus();
  }
  if (S_ISLNK(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--out_dir=", out_dir,
        " is a symbolic link; the tool never writes through one: give the folder itself"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--out_dir=", out_dir, " is not a folder; give a folder (made if missing)"));
  }
  std::error_code error;
  if (!overwrite && !std::filesystem::is_empty(out_dir, error)) {
    return absl::AlreadyExistsError(
        absl::StrCat("--out_dir=", out_dir,
                     " holds files; give an empty or new folder, or --overwrite to "
                     "replace this tool's files there"));
  }
  // Each file replaceable (no link or folder in its place), before any is written.
  for (const char* name : kOutFiles) {
    KD_RETURN_IF_ERROR(CheckWritablePath(absl::StrCat(out_dir, "/", name)));
  }
  return absl::OkStatus();
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

// One split's file: its ids (each document's, then eos) as little-endian bytes of `width`.
struct EncodedSplit {
  std::string bytes;
  int64_t documents = 0, tokens = 0, text_bytes = 0;
};

EncodedSplit EncodeSplit(const SentencePieceTokenizer& tokenizer,
                         const std::vector<std::string>& documents, int width) {
  EncodedSplit out;
  auto put = [&](uint32_t id) {
    for (int b = 0; b < width; ++b) out.bytes.push_back(static_cast<char>((id >> (8 * b)) & 0xff));
  };
  for (const std::string& document : documents) {
    const std::vector<int> ids = tokenizer.Encode(document);
    for (int id : ids) put(static_cast<uint32_t>(id));
    put(static_cast<uint32_t>(tokenizer.eos_id()));
    ++out.documents;
    out.tokens += static_cast<int64_t>(ids.size()) + 1;
    out.text_bytes += static_cast<int64_t>(document.size());
  }
  return out;
}

int Run() {
  const std::string corpus_flag = absl::GetFlag(FLAGS_corpus);
  const std::string out_flag = absl::GetFlag(FLAGS_out_dir);
  if (corpus_flag.empty()) return Fail(kTool, "--corpus is required (see --help)");
  if (out_flag.empty()) return Fail(kTool, "--out_dir is required (see --help)");
  const int64_t vocab_size = absl::GetFlag(FLAGS_vocab_size);
  // unk, bos, eos and the 256 byte pieces of byte_fallback come first: fewer leaves no room.
  if (vocab_size < 260 || vocab_size > (int64_t{1} << 31)) {
    return Fail(kTool, absl::StrCat("--vocab_size must be in [260, 2^31] (3 special pieces and "
                                    "256 byte pieces come first); got ",
                                    vocab_size));
  }
  const int64_t seed = absl::GetFlag(FLAGS_seed);
  if (seed < 0 || seed > int64_t{0xffffffff}) {
    return Fail(kTool, absl::StrCat("--seed must be in [0, 2^32); got ", seed));
  }
  absl::StatusOr<std::vector<double>> fractions = ParseSplit(absl::GetFlag(FLAGS_split));
  if (!fractions.ok()) return Stop(fractions.status());
  const std::string corpus = ResolveUserPath(corpus_flag);
  const std::string out_dir = ResolveUserPath(out_flag);

  absl::StatusOr<std::vector<std::string>> documents =
      ReadFortunes(corpus, absl::GetFlag(FLAGS_separator));
  if (!documents.ok()) return Stop(WithContext("--corpus", documents.status()));
  absl::StatusOr<std::vector<std::vector<std::string>>> splits =
      SplitDocuments(*documents, static_cast<uint64_t>(seed), *fractions);
  if (!splits.ok()) return Stop(WithContext("--split", splits.status()));
  if ((*splits)[0].empty()) {
    return Fail(kTool, absl::StrCat("the train split holds no documents (", documents->size(),
                                    " in the corpus); give a larger train fraction"));
  }
  if (absl::Status ready = CheckOutDir(out_dir, corpus, absl::GetFlag(FLAGS_overwrite));
      !ready.ok()) {
    return Stop(ready);
  }
  std::error_code error;
  const bool made = std::filesystem::create_directory(out_dir, error);
  if (error) {
    return Stop(absl::UnavailableError(
        absl::StrCat("--out_dir=", out_dir, ": cannot make it: ", error.message())));
  }

  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> model = TrainSentencePiece(
      (*splits)[0],
      {.vocab_size = vocab_size, .seed = static_cast<uint32_t>(seed), .work_dir = out_dir});
  if (!model.ok()) {
    if (made) std::filesystem::remove(out_dir, error);  // leaves nothing behind
    return Stop(model.status());
  }
  const double train_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> tokenizer =
      SentencePieceTokenizer::FromSerialized(*model, "the trained model");
  if (!tokenizer.ok()) return Stop(tokenizer.status());

  const bool narrow = (*tokenizer)->vocab_size() <= 65536;
  const int width = narrow ? 2 : 4;
  std::vector<EncodedSplit> encoded;
  for (const std::vector<std::string>& split : *splits) {
    encoded.push_back(EncodeSplit(**tokenizer, split, width));
  }

  std::vector<std::string> split_json;
  for (int s = 0; s < 3; ++s) {
    split_json.push_back(absl::StrFormat(
        "    %s: {\"file\": \"%s.bin\", \"documents\": %d, \"tokens\": %d, \"bytes\": %d}",
        JsonString(kSplitNames[s]), kSplitNames[s], encoded[s].documents, encoded[s].tokens,
        encoded[s].text_bytes));
  }
  const SentencePieceTokenizer& t = **tokenizer;
  const std::string meta =
      absl::StrCat("{\n  \"tokenizer\": \"tokenizer.model\",\n  \"model_type\": \"bpe\"",
                   ",\n  \"vocab_size\": ", t.vocab_size(), ",\n  \"eos_id\": ", t.eos_id(),
                   ",\n  \"bos_id\": ", t.bos_id(), ",\n  \"unk_id\": ", t.unk_id(),
                   ",\n  \"pad_id\": ", t.pad_id(), ",\n  \"dtype\": \"",
                   narrow ? "uint16" : "uint32", "\",\n  \"corpus\": ", JsonString(corpus),
                   ",\n  \"seed\": ", seed, ",\n  \"split\": [", absl::StrJoin(*fractions, ", "),
                   "],\n  \"splits\": {\n", absl::StrJoin(split_json, ",\n"), "\n  }\n}\n");

  const std::string* contents[] = {&*model, &encoded[0].bytes, &encoded[1].bytes, &encoded[2].bytes,
                                   &meta};
  for (int f = 0; f < 5; ++f) {
    const std::string path = absl::StrCat(out_dir, "/", kOutFiles[f]);
    if (absl::Status written = WriteFileAtomically(path, *contents[f]); !written.ok()) {
      return Stop(written);
    }
  }
  std::cout << absl::StrFormat(
      "corpus: %d documents, %d bytes of text\n", documents->size(),
      encoded[0].text_bytes + encoded[1].text_bytes + encoded[2].text_bytes);
  std::cout << absl::StrFormat("tokenizer: BPE, %d pieces (eos %d), trained in %.1f s\n",
                               t.vocab_size(), t.eos_id(), train_seconds);
  for (int s = 0; s < 3; ++s) {
    std::cout << absl::StrFormat("%s.bin: %d documents, %d tokens, %d bytes of text\n",
                                 kSplitNames[s], encoded[s].documents, encoded[s].tokens,
                                 encoded[s].text_bytes);
  }
  std::cout << "wrote " << out_dir << "/{tokenizer.model, train.bin, val.bin, test.bin, "
            << "meta.json} (" << (narrow ? "uint16" : "uint32") << " ids)\n";
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
