#include "distill/data/internal/sentencepiece_model.h"

#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kd {
namespace data_internal {
namespace {

// Protobuf's wire format, the part a ModelProto uses: varints, 32-bit values (float scores),
// length-delimited fields (strings, nested messages); 64-bit ones are skipped.
class WireReader {
 public:
  explicit WireReader(absl::string_view data) : data_(data) {}

  bool done() const { return data_.empty(); }
  // What is left to read (its start marks where the reader is).
  absl::string_view rest() const { return data_; }

  // The next field's number and wire type; false on malformed input.
  bool Key(uint64_t* field, int* wire_type) {
    uint64_t key;
    if (!Varint(&key)) return false;
    *field = key >> 3;
    *wire_type = static_cast<int>(key & 7);
    return *field != 0;
  }

  bool Varint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (data_.empty()) return false;
      const uint8_t byte = static_cast<uint8_t>(data_.front());
      data_.remove_prefix(1);
      *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }

  bool Bytes(absl::string_view* value) {
    uint64_t size;
    if (!Varint(&size) || size > data_.size()) return false;
    *value = data_.substr(0, size);
    data_.remove_prefix(size);
    return true;
  }

  bool Fixed32(uint32_t* value) {
    if (data_.size() < 4) return false;
    *value = 0;
    for (int i = 3; i >= 0; --i) *value = (*value << 8) | static_cast<uint8_t>(data_[i]);
    data_.remove_prefix(4);
    return true;
  }

  // Skips a field of `wire_type` (groups, long deprecated, are refused).
  bool Skip(int wire_type) {
    uint64_t v;
    absl::string_view s;
    uint32_t f;
    switch (wire_type) {
      case 0:
        return Varint(&v);
      case 1:
        if (data_.size() < 8) return false;
        data_.remove_prefix(8);
        return true;
      case 2:
        return Bytes(&s);
      case 5:
        return Fixed32(&f);
      default:
        return false;
    }
  }

 private:
  absl::string_view data_;
};

// Reads the fields of one message: `on_field(reader, field, wire_type)` consumes the fields it
// knows and returns false on a malformed one, or returns kSkip to leave the field to Skip.
constexpr int kSkip = 2;
template <typename OnField>
bool ReadMessage(absl::string_view bytes, OnField&& on_field) {
  WireReader reader(bytes);
  while (!reader.done()) {
    uint64_t field;
    int wire_type;
    if (!reader.Key(&field, &wire_type)) return false;
    const int read = on_field(reader, field, wire_type);
    if (read == 0) return false;
    if (read == kSkip && !reader.Skip(wire_type)) return false;
  }
  return true;
}

// Helpers for on_field: 1 when read, 0 on a malformed value.
int ReadBool(WireReader& r, int wire_type, bool* out) {
  uint64_t v;
  if (wire_type != 0 || !r.Varint(&v)) return 0;
  *out = v != 0;
  return 1;
}
int ReadInt(WireReader& r, int wire_type, int* out) {
  uint64_t v;
  if (wire_type != 0 || !r.Varint(&v)) return 0;
  *out = static_cast<int>(static_cast<int64_t>(v));
  return 1;
}
int ReadString(WireReader& r, int wire_type, std::string* out) {
  absl::string_view s;
  if (wire_type != 2 || !r.Bytes(&s)) return 0;
  out->assign(s.data(), s.size());
  return 1;
}

bool ReadPiece(absl::string_view bytes, SentencePiece* piece) {
  return ReadMessage(bytes, [&](WireReader& r, uint64_t field, int wire_type) {
    if (field == 1) return ReadString(r, wire_type, &piece->piece);
    if (field == 2) {
      uint32_t bits;
      if (wire_type != 5 || !r.Fixed32(&bits)) return 0;
      std::memcpy(&piece->score, &bits, sizeof(bits));
      return 1;
    }
    if (field == 3) {
      int type;
      if (!ReadInt(r, wire_type, &type) || type < 1 || type > 6) return 0;
      piece->type = static_cast<PieceType>(type);
      return 1;
    }
    return kSkip;
  });
}

bool ReadTrainerSpec(absl::string_view bytes, SentencePieceModel* m) {
  return ReadMessage(bytes, [&](WireReader& r, uint64_t field, int wire_type) {
    switch (field) {
      case 3:
        return ReadInt(r, wire_type, &m->model_type);
      case 24:
        return ReadBool(r, wire_type, &m->treat_whitespace_as_suffix);
      case 35:
        return ReadBool(r, wire_type, &m->byte_fallback);
      case 44:
        return ReadString(r, wire_type, &m->unk_surface);
      case 45:
        return ReadString(r, wire_type, &m->unk_piece);
      case 46:
        return ReadString(r, wire_type, &m->bos_piece);
      case 47:
        return ReadString(r, wire_type, &m->eos_piece);
      case 48:
        return ReadString(r, wire_type, &m->pad_piece);
      default:
        return kSkip;
    }
  });
}

// NormalizerSpec into `m`'s normalizer fields (or, for the denormalizer, only whether it has a
// rule).
bool ReadNormalizerSpec(absl::string_view bytes, SentencePieceModel* m, bool denormalizer) {
  return ReadMessage(bytes, [&](WireReader& r, uint64_t field, int wire_type) {
    std::string ignored;
    switch (field) {
      case 1:
        return ReadString(r, wire_type, denormalizer ? &ignored : &m->normalizer_name);
      case 2: {
        std::string charsmap;
        if (!ReadString(r, wire_type, &charsmap)) return 0;
        (denormalizer ? m->has_denormalizer : m->has_precompiled_charsmap) |= !charsmap.empty();
        return 1;
      }
      case 3:
        return denormalizer ? kSkip : ReadBool(r, wire_type, &m->add_dummy_prefix);
      case 4:
        return denormalizer ? kSkip : ReadBool(r, wire_type, &m->remove_extra_whitespaces);
      case 5:
        return denormalizer ? kSkip : ReadBool(r, wire_type, &m->escape_whitespaces);
      case 6: {  // normalization_rule_tsv: a rule too
        std::string tsv;
        if (!ReadString(r, wire_type, &tsv)) return 0;
        (denormalizer ? m->has_denormalizer : m->has_precompiled_charsmap) |= !tsv.empty();
        return 1;
      }
      default:
        return kSkip;
    }
  });
}

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

// Copies the fields of the message `bytes` to `out` unchanged, except that
// `edit(field, value, out)` decides for length-delimited ones: it returns true when it wrote
// (or dropped) the field itself. False on malformed input.
template <typename Edit>
bool CopyFields(absl::string_view bytes, std::string* out, Edit&& edit) {
  WireReader reader(bytes);
  while (!reader.done()) {
    const char* start = reader.rest().data();
    uint64_t field;
    int wire_type;
    if (!reader.Key(&field, &wire_type)) return false;
    absl::string_view value;
    if (wire_type == 2) {
      if (!reader.Bytes(&value)) return false;
      if (edit(field, value, out)) continue;
    } else if (!reader.Skip(wire_type)) {
      return false;
    }
    out->append(start, reader.rest().data() - start);
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> WithoutTrainerPaths(absl::string_view bytes) {
  std::string out;
  bool inner_ok = true;
  const bool ok =
      CopyFields(bytes, &out, [&](uint64_t field, absl::string_view value, std::string* model) {
        if (field != 2) return false;  // only the trainer_spec changes
        std::string spec;
        // TrainerSpec's input (1) and model_prefix (2) go.
        inner_ok &= CopyFields(value, &spec, [](uint64_t f, absl::string_view, std::string*) {
          return f == 1 || f == 2;
        });
        AppendVarint((2 << 3) | 2, model);
        AppendVarint(spec.size(), model);
        model->append(spec);
        return true;
      });
  if (!ok || !inner_ok) {
    return absl::DataLossError("the trained model is not a SentencePiece ModelProto");
  }
  return out;
}

absl::StatusOr<SentencePieceModel> ParseSentencePieceModel(absl::string_view bytes,
                                                           absl::string_view name) {
  SentencePieceModel model;
  const bool ok = ReadMessage(bytes, [&](WireReader& r, uint64_t field, int wire_type) {
    if (field < 1 || field > 5 || field == 4) return kSkip;
    absl::string_view message;
    if (wire_type != 2 || !r.Bytes(&message)) return 0;
    switch (field) {
      case 1: {
        model.pieces.emplace_back();
        return ReadPiece(message, &model.pieces.back()) ? 1 : 0;
      }
      case 2:
        return ReadTrainerSpec(message, &model) ? 1 : 0;
      case 3:
        return ReadNormalizerSpec(message, &model, /*denormalizer=*/false) ? 1 : 0;
      default:
        return ReadNormalizerSpec(message, &model, /*denormalizer=*/true) ? 1 : 0;
    }
  });
  if (!ok || model.pieces.empty()) {
    return absl::DataLossError(absl::StrCat(
        name, ": is not a SentencePiece model (", ok ? "no pieces" : "not a ModelProto",
        "); give a .model file written by SentencePiece's trainer (//tools:tokenize)"));
  }
  return model;
}

}  // namespace data_internal
}  // namespace kd
