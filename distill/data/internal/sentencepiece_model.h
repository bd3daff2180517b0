// A SentencePiece model file (SentencePiece's serialized ModelProto, a .model file) read into
// plain structs: the pieces and the few settings that encoding and decoding need. Parsed by
// protobuf with the part of upstream's schema libkd reads (sentencepiece_model.proto), not by
// SentencePiece's library (see distill/data/sentencepiece_tokenizer.h for why).
#ifndef LIBKD_DISTILL_DATA_INTERNAL_SENTENCEPIECE_MODEL_H_
#define LIBKD_DISTILL_DATA_INTERNAL_SENTENCEPIECE_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kd {
namespace data_internal {

// sentencepiece_model.proto's ModelProto.SentencePiece.Type.
enum class PieceType {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

struct SentencePiece {
  std::string piece;
  float score = 0;
  PieceType type = PieceType::kNormal;
};

// The fields of ModelProto that libkd reads, with the proto's defaults.
struct SentencePieceModel {
  std::vector<SentencePiece> pieces;
  // TrainerSpec.
  int model_type = 1;  // 1 unigram, 2 BPE, 3 word, 4 char
  bool byte_fallback = false;
  bool treat_whitespace_as_suffix = false;
  std::string unk_surface = " \xE2\x81\x87 ";  // " ⁇ "
  std::string unk_piece = "<unk>", bos_piece = "<s>", eos_piece = "</s>", pad_piece = "<pad>";
  // NormalizerSpec.
  std::string normalizer_name;
  bool has_precompiled_charsmap = false;  // a normalization rule (nmt_nfkc, ...)
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
  // The denormalizer's rule, if any.
  bool has_denormalizer = false;
};

// The model in `bytes`; DataLoss naming `name` when they are not a ModelProto.
absl::StatusOr<SentencePieceModel> ParseSentencePieceModel(absl::string_view bytes,
                                                           absl::string_view name);

// `bytes` (a ModelProto) without its trainer_spec's input and model_prefix, the paths of the
// trainer's temporary files, so that equal training gives equal model bytes; DataLoss when
// they are not a ModelProto.
absl::StatusOr<std::string> WithoutTrainerPaths(absl::string_view bytes);

}  // namespace data_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_DATA_INTERNAL_SENTENCEPIECE_MODEL_H_
