// A SentencePiece tokenizer (.model files: Llama's and Mistral's tokenizer.model, and what
// //tools:tokenize trains): text to ids and back, the ids Python's sentencepiece gives (a test
// holds them to ids recorded from Python on a committed model).
//
//   KD_ASSIGN_OR_RETURN(std::unique_ptr<kd::SentencePieceTokenizer> tokenizer,
//                       kd::SentencePieceTokenizer::Load("data/tokenizer.model"));
//   std::vector<int> ids = tokenizer->Encode("Hello world.");
//   ids.push_back(tokenizer->eos_id());  // a document's end, as //tools:tokenize writes it
//   KD_ASSIGN_OR_RETURN(std::string text, tokenizer->Decode(ids));  // "Hello world."
//
// Encode adds neither bos nor eos: where documents end is the caller's to say.
//
// Byte-pair-encoding models without a normalization rule (normalizer "identity", as Llama's and
// //tools:tokenize's) are read; unigram models and normalization rules (nmt_nfkc) are refused
// with a one-line error. The reader and the encoder are libkd's own, not SentencePiece's
// library: Debian's libsentencepiece 0.1.97 carries a copy of protobuf-lite 3.14 whose symbols
// it exports, and in a process that also loads Debian's libprotobuf 3.21 (every libkd program,
// for its configs) its calls bind to 3.21 and it aborts on the first model it loads ("This
// program was compiled against version 3.14.0 of the Protocol Buffer runtime library").
//
// Errors: Load returns NotFound for a missing file (naming //tools:tokenize, which makes one),
// DataLoss for a file that is not a SentencePiece model, InvalidArgument for a model of a kind
// that is not read; Decode returns OutOfRange for an id outside the vocabulary.
#ifndef LIBKD_DISTILL_DATA_SENTENCEPIECE_TOKENIZER_H_
#define LIBKD_DISTILL_DATA_SENTENCEPIECE_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kd {

// A loaded SentencePiece model. Immutable: Encode and Decode are safe to call from several
// threads at once.
class SentencePieceTokenizer {
 public:
  // The model in the file at `path` (SentencePiece's serialized ModelProto).
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(const std::string& path);
  // The model from the bytes of a .model file; `name` says where they came from in errors.
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> FromSerialized(
      absl::string_view model_proto, absl::string_view name);

  ~SentencePieceTokenizer();
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  // The ids of `text` (UTF-8; a malformed byte is read as U+FFFD, as SentencePiece reads it),
  // without bos or eos.
  std::vector<int> Encode(absl::string_view text) const;
  // The text of `ids`: control pieces (bos, eos) decode to nothing, byte pieces to their bytes
  // (U+FFFD for a byte that is no part of a UTF-8 character), the unknown piece to " ⁇ ".
  absl::StatusOr<std::string> Decode(const std::vector<int>& ids) const;

  // The number of pieces: every id is below it.
  int64_t vocab_size() const;
  // The special pieces' ids; -1 where the model has none.
  int64_t eos_id() const;
  int64_t bos_id() const;
  int64_t unk_id() const;
  int64_t pad_id() const;

 private:
  struct Model;
  explicit SentencePieceTokenizer(std::unique_ptr<const Model> model);

  std::unique_ptr<const Model> model_;
};

}  // namespace kd

#endif  // LIBKD_DISTILL_DATA_SENTENCEPIECE_TOKENIZER_H_
