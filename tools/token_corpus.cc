#include "tools/token_corpus.h"

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "distill/data/sentencepiece_tokenizer.h"
#include "distill/data/sentencepiece_trainer.h"
#include "distill/data/text_corpus.h"
#include "tools/tool_util.h"

namespace kd {
namespace {

constexpr const char* kOutFiles[] = {"tokenizer.model", "train.bin", "val.bin", "test.bin",
                                     "meta.json"};

// OK if out_dir may be written: not a link, a folder or nothing yet (its parent existing),
// empty unless overwrite, apart from the corpus.
absl::Status CheckOutDir(const TokenCorpusOptions& o, const std::string& corpus) {
  const std::string& out_dir = o.out_dir;
  const std::string named = absl::StrCat(o.out_dir_name, "=", out_dir);
  KD_RETURN_IF_ERROR(WithContext(o.out_dir_name, CheckNotInSystemFolder(out_dir)));
  if (IsWithinFolder(out_dir, corpus) || IsWithinFolder(corpus, out_dir)) {
    return absl::InvalidArgumentError(
        absl::StrCat(named, " overlaps ", o.corpus_name, "=", corpus,
                     "; libkd never writes among what it reads: give another ", o.out_dir_name));
  }
  struct stat st;
  if (::lstat(out_dir.c_str(), &st) != 0) {
    const std::string parent = std::filesystem::path(out_dir).parent_path().string();
    if (::stat(parent.empty() ? "." : parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::NotFoundError(
          absl::StrCat(named, ": its parent folder ", parent, " does not exist; make it first"));
    }
    return absl::OkStatus();
  }
  if (S_ISLNK(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        named, " is a symbolic link; libkd never writes through one: give the folder itself"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(named, " is not a folder; give a folder (made if missing)"));
  }
  std::error_code error;
  if (!o.overwrite && !std::filesystem::is_empty(out_dir, error)) {
    return absl::AlreadyExistsError(absl::StrCat(
        named,
        " holds files; give an empty or new folder, or --overwrite to replace the token "
        "files there"));
  }
  // Each file replaceable (no link or folder in its place), before any is written.
  for (const char* name : kOutFiles) {
    KD_RETURN_IF_ERROR(CheckWritablePath(absl::StrCat(out_dir, "/", name)));
  }
  return absl::OkStatus();
}

// One split's file: its ids (each document's, then eos) as little-endian bytes of `width`.
std::string EncodeSplit(const SentencePieceTokenizer& tokenizer,
                        const std::vector<std::string>& documents, int width,
                        TokenCorpusSummary::Split& summary) {
  std::string bytes;
  auto put = [&](uint32_t id) {
    for (int b = 0; b < width; ++b) bytes.push_back(static_cast<char>((id >> (8 * b)) & 0xff));
  };
  for (const std::string& document : documents) {
    const std::vector<int> ids = tokenizer.Encode(document);
    for (int id : ids) put(static_cast<uint32_t>(id));
    put(static_cast<uint32_t>(tokenizer.eos_id()));
    ++summary.documents;
    summary.tokens += static_cast<int64_t>(ids.size()) + 1;
    summary.text_bytes += static_cast<int64_t>(document.size());
  }
  return bytes;
}

}  // namespace

absl::StatusOr<TokenCorpusSummary> WriteTokenCorpus(const TokenCorpusOptions& o) {
  // unk, bos, eos and the 256 byte pieces of byte_fallback come first: fewer leaves no room.
  if (o.vocab_size < 260 || o.vocab_size > (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--vocab_size must be in [260, 2^31] (3 special pieces and 256 byte pieces "
                     "come first); got ",
                     o.vocab_size));
  }
  KD_ASSIGN_OR_RETURN(std::vector<std::string> documents,
                      WithContext(o.corpus_name, ReadFortunes(o.corpus, o.separator)));
  KD_ASSIGN_OR_RETURN(std::vector<std::vector<std::string>> splits,
                      WithContext("--split", SplitDocuments(documents, o.seed, o.split)));
  if (splits.size() != 3 || splits[0].empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the train split holds no documents (", documents.size(),
                     " in the corpus); give a larger train fraction"));
  }
  KD_RETURN_IF_ERROR(CheckOutDir(o, o.corpus));
  std::error_code error;
  const bool made = std::filesystem::create_directory(o.out_dir, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat(o.out_dir_name, "=", o.out_dir, ": cannot make it: ", error.message()));
  }

  TokenCorpusSummary summary;
  summary.documents = static_cast<int64_t>(documents.size());
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> model = TrainSentencePiece(
      splits[0], {.vocab_size = o.vocab_size, .seed = o.seed, .work_dir = o.out_dir});
  if (!model.ok()) {
    if (made) std::filesystem::remove(o.out_dir, error);  // leaves nothing behind
    return model.status();
  }
  summary.train_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  KD_ASSIGN_OR_RETURN(std::unique_ptr<SentencePieceTokenizer> tokenizer,
                      SentencePieceTokenizer::FromSerialized(*model, "the trained model"));
  const SentencePieceTokenizer& t = *tokenizer;
  summary.vocab_size = t.vocab_size();
  summary.eos_id = t.eos_id();
  summary.narrow = t.vocab_size() <= 65536;
  std::vector<std::string> encoded;
  for (int s = 0; s < 3; ++s) {
    encoded.push_back(EncodeSplit(t, splits[s], summary.narrow ? 2 : 4, summary.splits[s]));
  }

  std::vector<std::string> split_json;
  for (int s = 0; s < 3; ++s) {
    split_json.push_back(absl::StrFormat(
        "    %s: {\"file\": \"%s.bin\", \"documents\": %d, \"tokens\": %d, \"bytes\": %d}",
        JsonString(kTokenSplitNames[s]), kTokenSplitNames[s], summary.splits[s].documents,
        summary.splits[s].tokens, summary.splits[s].text_bytes));
  }
  const std::string meta = absl::StrCat(
      "{\n  \"tokenizer\": \"tokenizer.model\",\n  \"model_type\": \"bpe\"",
      ",\n  \"vocab_size\": ", t.vocab_size(), ",\n  \"eos_id\": ", t.eos_id(),
      ",\n  \"bos_id\": ", t.bos_id(), ",\n  \"unk_id\": ", t.unk_id(),
      ",\n  \"pad_id\": ", t.pad_id(), ",\n  \"dtype\": \"", summary.narrow ? "uint16" : "uint32",
      "\",\n  \"corpus\": ", JsonString(o.corpus), ",\n  \"seed\": ", o.seed, ",\n  \"split\": [",
      absl::StrJoin(o.split, ", "), "],\n  \"splits\": {\n", absl::StrJoin(split_json, ",\n"),
      "\n  }\n}\n");

  const std::string* contents[] = {&*model, &encoded[0], &encoded[1], &encoded[2], &meta};
  for (int f = 0; f < 5; ++f) {
    KD_RETURN_IF_ERROR(
        WriteFileAtomically(absl::StrCat(o.out_dir, "/", kOutFiles[f]), *contents[f]));
  }
  return summary;
}

}  // namespace kd
