#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "base/file_util.h"
#include "distill/data/sentencepiece_tokenizer.h"
#include "distill/data/sentencepiece_trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kFixtures[] = "tests/testdata/sentencepiece/";

nlohmann::json Expected() {
  absl::StatusOr<std::string> text =
      ReadFile(test::RunfilePath(std::string(kFixtures) + "expected.json"));
  EXPECT_THAT(text, IsOk());
  return nlohmann::json::parse(text.ok() ? *text : "{}");
}

std::unique_ptr<SentencePieceTokenizer> Load(const std::string& path) {
  absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> tokenizer =
      SentencePieceTokenizer::Load(path);
  EXPECT_THAT(tokenizer, IsOk());
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

// Python's sentencepiece (0.2.3) on the model //tools:tokenize trained on the fortunes corpus.
TEST(SentencePieceTokenizerTest, EncodesAndDecodesAsPythonDoes) {
  const nlohmann::json expected = Expected();
  std::unique_ptr<SentencePieceTokenizer> tokenizer =
      Load(test::RunfilePath(kFixtures + expected["model"].get<std::string>()));
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->vocab_size(), expected["vocab_size"]);
  EXPECT_EQ(tokenizer->eos_id(), expected["eos_id"]);
  EXPECT_EQ(tokenizer->bos_id(), expected["bos_id"]);
  EXPECT_EQ(tokenizer->unk_id(), expected["unk_id"]);
  EXPECT_EQ(tokenizer->pad_id(), expected["pad_id"]);
  ASSERT_GE(expected["cases"].size(), 20u);
  for (const nlohmann::json& c : expected["cases"]) {
    const std::string text = absl::HexStringToBytes(c["text_hex"].get<std::string>());
    const std::vector<int> ids = c["ids"].get<std::vector<int>>();
    EXPECT_EQ(tokenizer->Encode(text), ids) << "text " << absl::CEscape(text);
    EXPECT_THAT(tokenizer->Decode(ids),
                IsOkAndHolds(absl::HexStringToBytes(c["decoded_hex"].get<std::string>())))
        << "text " << absl::CEscape(text);
  }
  for (const nlohmann::json& d : expected["decodes"]) {
    const std::vector<int> ids = d["ids"].get<std::vector<int>>();
    EXPECT_THAT(tokenizer->Decode(ids),
                IsOkAndHolds(absl::HexStringToBytes(d["decoded_hex"].get<std::string>())))
        << ::testing::PrintToString(ids);
  }
}

// A ModelProto written by hand (protobuf's wire format), for models built to test one rule.
std::string Varint(uint64_t v) {
  std::string out;
  for (; v >= 0x80; v >>= 7) out.push_back(static_cast<char>((v & 0x7f) | 0x80));
  out.push_back(static_cast<char>(v));
  return out;
}
std::string Bytes(int field, const std::string& value) {
  return Varint(field << 3 | 2) + Varint(value.size()) + value;
}
std::string Int(int field, uint64_t value) { return Varint(field << 3) + Varint(value); }
std::string Piece(const std::string& piece, float score, int type) {
  std::string fixed(4, '\0');
  std::memcpy(fixed.data(), &score, 4);
  return Bytes(1, Bytes(1, piece) + Varint(2 << 3 | 5) + fixed + Int(3, type));
}
constexpr int kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;
const std::string kBpe = Bytes(2, Int(3, 2));  // trainer_spec { model_type: BPE }
// normalizer_spec { name: "identity" add_dummy_prefix: true remove_extra_whitespaces: false }
const std::string kIdentity = Bytes(3, Bytes(1, "identity") + Int(3, 1) + Int(4, 0));

std::string SmallPieces() {
  return Piece("<unk>", 0, kUnknown) + Piece("<s>", 0, kControl) + Piece("</s>", 0, kControl) +
         Piece("\xE2\x96\x81", -1, kNormal) + Piece("a", -1, kNormal) + Piece("b", -2, kNormal) +
         Piece(
             "\xE2\x96\x81"
             "a",
             -3, kNormal) +
         Piece("ab", -4, kUnused) +
         Piece(
             "\xE2\x96\x81"
             "ab",
             -5, kNormal) +
         Piece("<sep>", 0, kUserDefined);
}

std::unique_ptr<SentencePieceTokenizer> FromBytes(const std::string& bytes) {
  auto tokenizer = SentencePieceTokenizer::FromSerialized(bytes, "hand.model");
  EXPECT_THAT(tokenizer, IsOk());
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

// Ids: 0 <unk>, 1 <s>, 2 </s>, 3 ▁, 4 a, 5 b, 6 ▁a (score -3), 7 ab (unused, -4), 8 ▁ab (-5),
// 9 <sep> (user-defined).
TEST(SentencePieceTokenizerTest, BpeMergesByScoreOnAHandBuiltModel) {
  std::unique_ptr<SentencePieceTokenizer> t = FromBytes(SmallPieces() + kBpe + kIdentity);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->vocab_size(), 10);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_EQ(t->pad_id(), -1);
  // ▁ab: ▁a (-3) before ab (-4), then ▁ab.
  EXPECT_THAT(t->Encode("ab"), ElementsAre(8));
  EXPECT_THAT(t->Encode("b a"), ElementsAre(3, 5, 6));
  EXPECT_THAT(t->Encode(" a"), ElementsAre(3, 6));  // the dummy prefix and the space
  // ▁cab: only ab merges; ab is unused, so it goes back to a and b; c is unknown.
  EXPECT_THAT(t->Encode("cab"), ElementsAre(3, 0, 4, 5));
  // Unknown characters in a row are one unknown piece (no byte fallback here).
  EXPECT_THAT(t->Encode("cd"), ElementsAre(3, 0));
  // A user-defined symbol is one piece that never merges.
  EXPECT_THAT(t->Encode("a<sep>b"), ElementsAre(6, 9, 5));
  EXPECT_THAT(t->Encode(""), IsEmpty());

  EXPECT_THAT(t->Decode({8}), IsOkAndHolds("ab"));
  EXPECT_THAT(t->Decode({3, 5, 6}), IsOkAndHolds("b a"));
  EXPECT_THAT(t->Decode({3, 6}), IsOkAndHolds(" a"));
  EXPECT_THAT(t->Decode({1, 6, 2}), IsOkAndHolds("a"));  // controls show nothing
  EXPECT_THAT(t->Decode({0, 4}), IsOkAndHolds(" \xE2\x81\x87 a"));
  EXPECT_THAT(t->Decode({10}), StatusIs(absl::StatusCode::kOutOfRange,
                                        "SentencePiece decode: id 10 at position 0 is outside "
                                        "the model's 10 pieces"));
}

TEST(SentencePieceTokenizerTest, DefaultNormalizerRemovesExtraWhitespace) {
  // No normalizer_spec: the proto's defaults (dummy prefix, extra whitespace removed).
  std::unique_ptr<SentencePieceTokenizer> t = FromBytes(SmallPieces() + kBpe);
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(t->Encode("  a  b "), ElementsAre(6, 3, 5));
  EXPECT_THAT(t->Decode({6, 3, 5}), IsOkAndHolds("a b"));
}

TEST(SentencePieceTokenizerTest, ByteFallback) {
  std::string pieces =
      Piece("<unk>", 0, kUnknown) + Piece("<s>", 0, kControl) + Piece("</s>", 0, kControl);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    pieces += Piece(name, 0, kByte);
  }
  pieces += Piece("\xE2\x96\x81", -1, kNormal) + Piece("a", -1, kNormal);
  const std::string trainer = Bytes(2, Int(3, 2) + Int(35, 1));  // BPE, byte_fallback
  std::unique_ptr<SentencePieceTokenizer> t = FromBytes(pieces + trainer + kIdentity);
  ASSERT_NE(t, nullptr);
  const int byte0 = 3;
  EXPECT_THAT(t->Encode("a\xC3\xA9"), ElementsAre(259, 260, byte0 + 0xC3, byte0 + 0xA9));
  // A malformed byte is read as U+FFFD, whose bytes are EF BF BD.
  EXPECT_THAT(t->Encode("\xFF"), ElementsAre(259, byte0 + 0xEF, byte0 + 0xBF, byte0 + 0xBD));
  EXPECT_THAT(t->Decode({259, 260, byte0 + 0xC3, byte0 + 0xA9}), IsOkAndHolds("a\xC3\xA9"));
  EXPECT_THAT(t->Decode({byte0 + 0xE2, byte0 + 0x82, byte0 + 0xAC}), IsOkAndHolds("\xE2\x82\xAC"));
  EXPECT_THAT(t->Decode({byte0 + 0xC3, 260}), IsOkAndHolds("\xEF\xBF\xBD"
                                                           "a"));
}

TEST(SentencePieceTokenizerTest, RefusesWhatItDoesNotRead) {
  const std::string suffix =
      "; libkd reads SentencePiece BPE models without normalization rules (Llama's; "
      "//tools:tokenize trains them)";
  EXPECT_THAT(SentencePieceTokenizer::FromSerialized(SmallPieces() + Bytes(2, Int(3, 1)), "u"),
              StatusIs(absl::StatusCode::kInvalidArgument, "u: is a unigram model" + suffix));
  const std::string nfkc = Bytes(3, Bytes(1, "nmt_nfkc") + Bytes(2, "rules"));
  EXPECT_THAT(SentencePieceTokenizer::FromSerialized(SmallPieces() + kBpe + nfkc, "n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "n: normalizes text by the rule \"nmt_nfkc\"" + suffix));
  EXPECT_THAT(SentencePieceTokenizer::FromSerialized("not a model", "x"),
              StatusIs(absl::StatusCode::kDataLoss,
                       "x: is not a SentencePiece model (not a ModelProto); give a .model file "
                       "written by SentencePiece's trainer (//tools:tokenize)"));
  EXPECT_THAT(SentencePieceTokenizer::FromSerialized("", "e"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("(no pieces)")));
  EXPECT_THAT(SentencePieceTokenizer::FromSerialized(Piece("a", 0, kNormal) + kBpe, "k"),
              StatusIs(absl::StatusCode::kDataLoss,
                       "k: it has no unknown piece; the model file "
                       "is damaged"));
  const std::string missing = test::TempPath("missing.model");
  EXPECT_THAT(SentencePieceTokenizer::Load(missing),
              StatusIs(absl::StatusCode::kNotFound,
                       "no SentencePiece model " + missing +
                           "; make one with bazel run //tools:tokenize -- --corpus=<text> "
                           "--out_dir=<folder> (it writes <folder>/tokenizer.model)"));
}

const std::vector<std::string> kLines = {
    "The quick brown fox jumps over the lazy dog.",
    "A journey of a thousand miles begins with a single step.\nTo be or not to be.",
    "All that glitters is not gold; all who wander are not lost.",
    "Numbers like 12345 and 2024 are split into digits.",
};

TEST(SentencePieceTrainerTest, TrainsATinyModelThatRoundTrips) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> model = TrainSentencePiece(kLines, {.vocab_size = 320});
  ASSERT_THAT(model, IsOk());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
  std::unique_ptr<SentencePieceTokenizer> t = FromBytes(*model);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->vocab_size(), 320);
  EXPECT_EQ(t->unk_id(), 0);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  for (const std::string text : {"The lazy fox.", "unseen \xE6\x97\xA5\xE6\x9C\xAC characters",
                                 "two\nlines\n", "  spaced   out ", "digits 9876"}) {
    const std::vector<int> ids = t->Encode(text);
    EXPECT_THAT(t->Decode(ids), IsOkAndHolds(text)) << absl::CEscape(text);
  }
  // Byte fallback: a character never seen is its bytes (ids 3 + byte).
  EXPECT_THAT(t->Encode("\xE6\x97\xA5"), ::testing::IsSupersetOf({3 + 0xE6, 3 + 0x97, 3 + 0xA5}));
  // Equal training, equal bytes.
  EXPECT_THAT(TrainSentencePiece(kLines, {.vocab_size = 320}), IsOkAndHolds(*model));
}

TEST(SentencePieceTrainerTest, ErrorsSayWhy) {
  EXPECT_THAT(TrainSentencePiece(kLines, {.vocab_size = 100}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::MatchesRegex(
                           "SentencePiece training: a vocabulary of 100 pieces cannot hold the 3 "
                           "special pieces, the 256 byte pieces and the corpus's characters: give "
                           "vocab_size >= [0-9]+")));
  EXPECT_THAT(TrainSentencePiece({"", "\n\n"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "SentencePiece training: no text to train on; give documents with text"));
  EXPECT_THAT(TrainSentencePiece(kLines, {.spm_train = "/nonexistent/spm_train"}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("install Debian's sentencepiece package")));
}

}  // namespace
}  // namespace kd
