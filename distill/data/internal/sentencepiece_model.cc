#include "distill/data/internal/sentencepiece_model.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "distill/data/internal/sentencepiece_model.pb.h"
#include "google/protobuf/message.h"
#include "google/protobuf/unknown_field_set.h"

namespace kd {
namespace data_internal {
namespace {

namespace spm = ::kd::sentencepiece;

// Whether every field of `message` whose number the schema knows came with its declared type:
// protobuf keeps a known field of another wire type (or an enum value out of range) among the
// unknown fields instead of failing, which for a .model file means it is not one.
bool KnownFieldsWellFormed(const google::protobuf::Message& message) {
  const google::protobuf::UnknownFieldSet& unknown =
      message.GetReflection()->GetUnknownFields(message);
  for (int i = 0; i < unknown.field_count(); ++i) {
    if (message.GetDescriptor()->FindFieldByNumber(unknown.field(i).number()) != nullptr) {
      return false;
    }
  }
  return true;
}

bool WellFormed(const spm::ModelProto& proto) {
  if (!KnownFieldsWellFormed(proto) || !KnownFieldsWellFormed(proto.trainer_spec()) ||
      !KnownFieldsWellFormed(proto.normalizer_spec()) ||
      !KnownFieldsWellFormed(proto.denormalizer_spec())) {
    return false;
  }
  for (const spm::ModelProto::SentencePiece& piece : proto.pieces()) {
    if (!KnownFieldsWellFormed(piece)) return false;
  }
  return true;
}

// A normalization rule: a precompiled character map or a rule table.
bool HasRule(const spm::NormalizerSpec& spec) {
  return !spec.precompiled_charsmap().empty() || !spec.normalization_rule_tsv().empty();
}

}  // namespace

absl::StatusOr<std::string> WithoutTrainerPaths(absl::string_view bytes) {
  spm::ModelProto proto;
  if (!proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) || !WellFormed(proto)) {
    return absl::DataLossError("the trained model is not a SentencePiece ModelProto");
  }
  proto.mutable_trainer_spec()->clear_input();
  proto.mutable_trainer_spec()->clear_model_prefix();
  return proto.SerializeAsString();
}

absl::StatusOr<SentencePieceModel> ParseSentencePieceModel(absl::string_view bytes,
                                                           absl::string_view name) {
  spm::ModelProto proto;
  const bool ok =
      proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) && WellFormed(proto);
  if (!ok || proto.pieces().empty()) {
    return absl::DataLossError(absl::StrCat(
        name, ": is not a SentencePiece model (", ok ? "no pieces" : "not a ModelProto",
        "); give a .model file written by SentencePiece's trainer (//tools:tokenize)"));
  }
  SentencePieceModel model;
  for (const spm::ModelProto::SentencePiece& piece : proto.pieces()) {
    model.pieces.push_back({.piece = piece.piece(),
                            .score = piece.score(),
                            .type = static_cast<PieceType>(piece.type())});
  }
  const spm::TrainerSpec& trainer = proto.trainer_spec();
  model.model_type = trainer.model_type();
  model.byte_fallback = trainer.byte_fallback();
  model.treat_whitespace_as_suffix = trainer.treat_whitespace_as_suffix();
  model.unk_surface = trainer.unk_surface();
  model.unk_piece = trainer.unk_piece();
  model.bos_piece = trainer.bos_piece();
  model.eos_piece = trainer.eos_piece();
  model.pad_piece = trainer.pad_piece();
  const spm::NormalizerSpec& normalizer = proto.normalizer_spec();
  model.normalizer_name = normalizer.name();
  model.has_precompiled_charsmap = HasRule(normalizer);
  model.add_dummy_prefix = normalizer.add_dummy_prefix();
  model.remove_extra_whitespaces = normalizer.remove_extra_whitespaces();
  model.escape_whitespaces = normalizer.escape_whitespaces();
  model.has_denormalizer = HasRule(proto.denormalizer_spec());
  return model;
}

}  // namespace data_internal
}  // namespace kd
