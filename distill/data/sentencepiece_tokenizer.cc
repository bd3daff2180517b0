// SentencePiece's encoding of BPE models, as its processor does it (identity normalization,
// whitespace as U+2581, the dummy prefix, byte fallback, user-defined symbols, unused pieces
// resegmented), and its decoding.
#include "distill/data/sentencepiece_tokenizer.h"

#include <array>
#include <cstdio>
#include <functional>
#include <queue>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "distill/data/internal/sentencepiece_model.h"

namespace kd {

using data_internal::PieceType;
using data_internal::SentencePieceModel;

namespace {

constexpr absl::string_view kSpaceSymbol = "\xE2\x96\x81";      // U+2581, SentencePiece's space
constexpr absl::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD
// The most a model file may hold: Llama's is 0.5 MB, a 256k-piece model about 5 MB.
constexpr int64_t kMaxModelBytes = int64_t{256} << 20;

// The length of the well-formed UTF-8 character at the start of `s` (shortest form, no
// surrogates, at most U+10FFFF), or 0 if it is malformed. U+FFFD itself is well formed.
int Utf8CharLength(absl::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const auto trail = [&](size_t i) { return i < s.size() && (byte(i) & 0xC0) == 0x80; };
  if (s.empty()) return 0;
  const uint8_t b = byte(0);
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return trail(1) ? 2 : 0;
  if (b >= 0xE0 && b <= 0xEF) {
    if (!trail(1) || !trail(2)) return 0;
    const uint32_t c = ((b & 0x0Fu) << 12) | ((byte(1) & 0x3Fu) << 6) | (byte(2) & 0x3Fu);
    return (c >= 0x800 && (c < 0xD800 || c > 0xDFFF)) ? 3 : 0;
  }
  if (b >= 0xF0 && b <= 0xF4) {
    if (!trail(1) || !trail(2) || !trail(3)) return 0;
    const uint32_t c = ((b & 0x07u) << 18) | ((byte(1) & 0x3Fu) << 12) | ((byte(2) & 0x3Fu) << 6) |
                       (byte(3) & 0x3Fu);
    return (c >= 0x10000 && c <= 0x10FFFF) ? 4 : 0;
  }
  return 0;
}

// The bytes a character starting with `lead` claims by its lead byte alone (SentencePiece's
// split of already-normalized text into symbols).
int LeadLength(uint8_t lead) {
  static constexpr std::array<int, 16> kLength = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLength[lead >> 4];
}

std::string BytePiece(uint8_t b) {
  char buffer[8];
  std::snprintf(buffer, sizeof(buffer), "<0x%02X>", b);
  return buffer;
}

}  // namespace

struct SentencePieceTokenizer::Model {
  SentencePieceModel proto;
  // Pieces BPE may merge into (normal, user-defined, unused), and the others (control,
  // unknown, byte), which only PieceToId finds.
  absl::flat_hash_map<std::string, int> pieces, reserved;
  absl::flat_hash_map<std::string, int> user_defined;
  size_t longest_user_defined = 0;
  int unk = -1;
  std::array<int, 256> byte_ids{};  // the id of each byte's piece <0xXX>
  std::vector<int> byte_of;         // each id's byte, -1 for pieces that are not bytes

  int PieceToId(absl::string_view piece) const {
    if (auto it = reserved.find(piece); it != reserved.end()) return it->second;
    if (auto it = pieces.find(piece); it != pieces.end()) return it->second;
    return unk;
  }
  PieceType Type(int id) const { return proto.pieces[id].type; }
  int SpecialId(const std::string& piece, PieceType type) const {
    const int id = PieceToId(piece);
    return id >= 0 && Type(id) == type ? id : -1;
  }

  // The longest user-defined symbol `s` starts with: its length, or 0.
  size_t UserDefinedPrefix(absl::string_view s) const {
    for (size_t n = std::min(longest_user_defined, s.size()); n > 0; --n) {
      if (user_defined.contains(s.substr(0, n))) return n;
    }
    return 0;
  }

  std::string Normalize(absl::string_view input) const;
  std::vector<std::pair<absl::string_view, int>> EncodeBpe(absl::string_view normalized) const;
};

// SentencePiece's Normalizer::Normalize without a rule: spaces escaped as U+2581, the dummy
// prefix, extra whitespace removed if the model says so, malformed UTF-8 read as U+FFFD.
std::string SentencePieceTokenizer::Model::Normalize(absl::string_view input) const {
  const SentencePieceModel& spec = proto;
  std::string out;
  if (spec.remove_extra_whitespaces) {
    while (!input.empty() && input.front() == ' ' && UserDefinedPrefix(input) == 0) {
      input.remove_prefix(1);
    }
  }
  if (input.empty()) return out;
  const absl::string_view space = spec.escape_whitespaces ? kSpaceSymbol : " ";
  if (spec.add_dummy_prefix) out.append(space.data(), space.size());
  bool is_prev_space = spec.remove_extra_whitespaces;
  while (!input.empty()) {
    // The next unit: a user-defined symbol, a character, or U+FFFD for a malformed byte.
    absl::string_view unit;
    size_t consumed = UserDefinedPrefix(input);
    if (consumed > 0) {
      unit = input.substr(0, consumed);
    } else if (const int n = Utf8CharLength(input); n > 0) {
      unit = input.substr(0, consumed = n);
    } else {
      unit = kReplacementChar;
      consumed = 1;
    }
    while (is_prev_space && absl::ConsumePrefix(&unit, " ")) {
    }
    if (!unit.empty()) {
      for (char c : unit) {
        if (c == ' ' && spec.escape_whitespaces) {
          out.append(kSpaceSymbol.data(), kSpaceSymbol.size());
        } else {
          out.push_back(c);
        }
      }
      is_prev_space = unit.back() == ' ';
    }
    input.remove_prefix(consumed);
    if (!spec.remove_extra_whitespaces) is_prev_space = false;
  }
  if (spec.remove_extra_whitespaces) {
    while (absl::EndsWith(out, space)) out.resize(out.size() - space.size());
  }
  return out;
}

// SentencePiece's BPE: start from characters (user-defined symbols whole and frozen), merge
// the adjacent pair whose merged piece scores highest (the leftmost among equals) until no
// pair is a piece, then split unused pieces back into the pieces they were merged from.
std::vector<std::pair<absl::string_view, int>> SentencePieceTokenizer::Model::EncodeBpe(
    absl::string_view normalized) const {
  struct Symbol {
    int prev, next;
    bool frozen;
    absl::string_view piece;
  };
  struct Pair {
    int left, right;
    float score;
    size_t size;
  };
  const auto lower = [](const Pair& a, const Pair& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Pair, std::vector<Pair>, decltype(lower)> agenda(lower);
  std::vector<Symbol> symbols;
  // An unused piece's halves, for the resegmentation.
  absl::flat_hash_map<absl::string_view, std::pair<absl::string_view, absl::string_view>> halves;

  auto add_pair = [&](int left, int right) {
    if (left < 0 || right < 0 || symbols[left].frozen || symbols[right].frozen) return;
    const absl::string_view merged(symbols[left].piece.data(),
                                   symbols[left].piece.size() + symbols[right].piece.size());
    const auto it = pieces.find(merged);
    if (it == pieces.end()) return;
    agenda.push({left, right, proto.pieces[it->second].score, merged.size()});
    if (Type(it->second) == PieceType::kUnused) {
      halves[merged] = {symbols[left].piece, symbols[right].piece};
    }
  };

  while (!normalized.empty()) {
    const size_t user = UserDefinedPrefix(normalized);
    const size_t length =
        user > 0 ? user
                 : std::min(normalized.size(),
                            static_cast<size_t>(LeadLength(static_cast<uint8_t>(normalized[0]))));
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, length == normalized.size() ? -1 : index + 1, user > 0,
                       normalized.substr(0, length)});
    normalized.remove_prefix(length);
  }
  for (size_t i = 1; i < symbols.size(); ++i)
    add_pair(static_cast<int>(i) - 1, static_cast<int>(i));

  while (!agenda.empty()) {
    const Pair top = agenda.top();
    agenda.pop();
    Symbol& left = symbols[top.left];
    Symbol& right = symbols[top.right];
    // Stale: one side was merged away or grew since the pair was pushed.
    if (left.piece.empty() || right.piece.empty() ||
        left.piece.size() + right.piece.size() != top.size) {
      continue;
    }
    left.piece = absl::string_view(left.piece.data(), top.size);
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    right.piece = absl::string_view();
    add_pair(left.prev, top.left);
    add_pair(top.left, left.next);
  }

  std::vector<std::pair<absl::string_view, int>> out;
  std::function<void(absl::string_view)> resegment = [&](absl::string_view piece) {
    const int id = PieceToId(piece);
    const auto it = halves.find(piece);
    if (id < 0 || Type(id) != PieceType::kUnused || it == halves.end()) {
      out.emplace_back(piece, id);
      return;
    }
    resegment(it->second.first);
    resegment(it->second.second);
  };
  for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) resegment(symbols[i].piece);
  return out;
}

SentencePieceTokenizer::SentencePieceTokenizer(std::unique_ptr<const Model> model)
    : model_(std::move(model)) {}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Load(
    const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFile(path, kMaxModelBytes);
  if (absl::IsNotFound(bytes.status())) {
    return absl::NotFoundError(
        absl::StrCat("no SentencePiece model ", path,
                     "; make one with bazel run //tools:tokenize -- "
                     "--corpus=<text> --out_dir=<folder> (it writes <folder>/tokenizer.model)"));
  }
  KD_RETURN_IF_ERROR(bytes.status());
  return FromSerialized(*bytes, path);
}

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::FromSerialized(
    absl::string_view model_proto, absl::string_view name) {
  auto model = std::make_unique<Model>();
  KD_ASSIGN_OR_RETURN(model->proto, data_internal::ParseSentencePieceModel(model_proto, name));
  const SentencePieceModel& proto = model->proto;
  const auto refuse = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", what,
                     "; libkd reads SentencePiece BPE models without normalization rules "
                     "(Llama's; //tools:tokenize trains them)"));
  };
  if (proto.model_type != 2) {
    static constexpr const char* kTypes[] = {"?", "unigram", "BPE", "word", "char"};
    return refuse(absl::StrCat(
        "is a ", proto.model_type >= 1 && proto.model_type <= 4 ? kTypes[proto.model_type] : "?",
        " model"));
  }
  if (proto.has_precompiled_charsmap) {
    return refuse(absl::StrCat("normalizes text by the rule \"", proto.normalizer_name, "\""));
  }
  if (proto.has_denormalizer) return refuse("has a denormalization rule");
  if (proto.treat_whitespace_as_suffix) return refuse("treats whitespace as a suffix");

  const auto corrupt = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(name, ": ", what, "; the model file is damaged"));
  };
  std::array<bool, 256> has_byte{};
  model->byte_of.assign(proto.pieces.size(), -1);
  for (int id = 0; id < static_cast<int>(proto.pieces.size()); ++id) {
    const data_internal::SentencePiece& p = proto.pieces[id];
    if (p.piece.empty()) return corrupt(absl::StrCat("piece ", id, " is empty"));
    const bool mergeable = p.type == PieceType::kNormal || p.type == PieceType::kUserDefined ||
                           p.type == PieceType::kUnused;
    if (!(mergeable ? model->pieces : model->reserved).emplace(p.piece, id).second) {
      return corrupt(absl::StrCat("piece ", id, " \"", p.piece, "\" is there twice"));
    }
    if (p.type == PieceType::kUserDefined) {
      model->user_defined.emplace(p.piece, id);
      model->longest_user_defined = std::max(model->longest_user_defined, p.piece.size());
    }
    if (p.type == PieceType::kUnknown) {
      if (model->unk >= 0) return corrupt("it has two unknown pieces");
      model->unk = id;
    }
    if (p.type == PieceType::kByte) {
      unsigned value = 256;
      if (p.piece.size() != 6 || std::sscanf(p.piece.c_str(), "<0x%2X>", &value) != 1 ||
          value > 255 || BytePiece(static_cast<uint8_t>(value)) != p.piece) {
        return corrupt(absl::StrCat("byte piece ", id, " \"", p.piece, "\" is no <0xXX>"));
      }
      has_byte[value] = true;
      model->byte_ids[value] = id;
      model->byte_of[id] = static_cast<int>(value);
    }
  }
  if (model->unk < 0) return corrupt("it has no unknown piece");
  if (proto.byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      if (!has_byte[b]) return corrupt(absl::StrCat("byte fallback lacks ", BytePiece(b)));
    }
  }
  return std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer(std::move(model)));
}

std::vector<int> SentencePieceTokenizer::Encode(absl::string_view text) const {
  const Model& m = *model_;
  const std::string normalized = m.Normalize(text);
  std::vector<int> ids;
  bool prev_unknown = false;
  for (const auto& [piece, id] : m.EncodeBpe(normalized)) {
    const bool unknown = m.Type(id) == PieceType::kUnknown;
    if (unknown && m.proto.byte_fallback) {
      for (char c : piece) ids.push_back(m.byte_ids[static_cast<uint8_t>(c)]);
    } else if (!(unknown && prev_unknown)) {  // a run of unknown characters is one piece
      ids.push_back(id);
    }
    prev_unknown = unknown;
  }
  return ids;
}

absl::StatusOr<std::string> SentencePieceTokenizer::Decode(const std::vector<int>& ids) const {
  const Model& m = *model_;
  const int size = static_cast<int>(m.proto.pieces.size());
  std::string text, bytes;
  // Byte pieces in a row are one byte string, read as UTF-8 (U+FFFD for a stray byte).
  auto flush_bytes = [&] {
    absl::string_view rest = bytes;
    while (!rest.empty()) {
      const int n = Utf8CharLength(rest);
      const absl::string_view unit = n > 0 ? rest.substr(0, n) : kReplacementChar;
      text.append(unit.data(), unit.size());
      rest.remove_prefix(n > 0 ? n : 1);
    }
    bytes.clear();
  };
  // The dummy prefix's space is dropped from the first piece that shows text.
  const bool strips_first_space = m.proto.add_dummy_prefix || m.proto.remove_extra_whitespaces;
  bool at_start = true, start_space_seen = false;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int id = ids[i];
    if (id < 0 || id >= size) {
      return absl::OutOfRangeError(absl::StrCat("SentencePiece decode: id ", id, " at position ", i,
                                                " is outside the model's ", size, " pieces"));
    }
    const data_internal::SentencePiece& p = m.proto.pieces[id];
    if (p.type == PieceType::kByte) {
      bytes.push_back(static_cast<char>(m.byte_of[id]));
      continue;
    }
    flush_bytes();
    if (start_space_seen || !text.empty()) at_start = false;
    start_space_seen = false;
    if (p.type == PieceType::kControl) continue;
    if (p.type == PieceType::kUnknown) {
      text.append(m.proto.unk_surface);
      continue;
    }
    absl::string_view piece = p.piece;
    if (at_start && strips_first_space) {
      start_space_seen = absl::ConsumePrefix(&piece, kSpaceSymbol);
      if (m.proto.remove_extra_whitespaces) start_space_seen = false;
    }
    text.append(absl::StrReplaceAll(piece, {{kSpaceSymbol, " "}}));
  }
  flush_bytes();
  return text;
}

int64_t SentencePieceTokenizer::vocab_size() const { return model_->proto.pieces.size(); }
int64_t SentencePieceTokenizer::eos_id() const {
  return model_->SpecialId(model_->proto.eos_piece, PieceType::kControl);
}
int64_t SentencePieceTokenizer::bos_id() const {
  return model_->SpecialId(model_->proto.bos_piece, PieceType::kControl);
}
int64_t SentencePieceTokenizer::pad_id() const {
  return model_->SpecialId(model_->proto.pad_piece, PieceType::kControl);
}
int64_t SentencePieceTokenizer::unk_id() const {
  return model_->SpecialId(model_->proto.unk_piece, PieceType::kUnknown);
}

}  // namespace kd
