#include "distill/data/text_corpus.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(SplitSeparatedTextTest, DocumentsBetweenSeparatorLines) {
  EXPECT_THAT(SplitSeparatedText("one\n%\ntwo\nlines\n%\nthree\n", "%"),
              ElementsAre("one", "two\nlines", "three"));
  // Empty documents go; blank lines inside one stay; no final newline needed; \r\n files.
  EXPECT_THAT(SplitSeparatedText("%\n%\na\n\nb\n%\n\n%\nlast", "%"), ElementsAre("a\n\nb", "last"));
  EXPECT_THAT(SplitSeparatedText("a\r\n%\r\nb\r\n", "%"), ElementsAre("a\r", "b\r"));
  // A separator inside a line is text.
  EXPECT_THAT(SplitSeparatedText("50% off\n%%\n", "%"), ElementsAre("50% off\n%%"));
  // An empty separator: paragraphs.
  EXPECT_THAT(SplitSeparatedText("p one\nstill\n\np two\n", ""),
              ElementsAre("p one\nstill", "p two"));
  EXPECT_THAT(SplitSeparatedText("", "%"), IsEmpty());
  EXPECT_THAT(SplitSeparatedText("%\n%\n", "%"), IsEmpty());
}

TEST(ReadFortunesTest, ReadsTextFilesWithoutAnExtensionInNameOrder) {
  const std::string folder = test::TempPath("fortunes");
  std::filesystem::create_directories(folder);
  std::ofstream(folder + "/zoo") << "z1\n%\nz2\n%\n";
  std::ofstream(folder + "/art") << "a1\n%\na2 line\nmore\n";
  std::ofstream(folder + "/art.dat") << "binary index";
  std::filesystem::create_directories(folder + "/subfolder");
  ::unlink((folder + "/art.u8").c_str());
  std::filesystem::create_symlink("art", folder + "/art.u8");
  ::unlink((folder + "/link").c_str());
  std::filesystem::create_symlink("zoo", folder + "/link");  // a link is skipped, name or not
  EXPECT_THAT(ReadFortunes(folder), IsOkAndHolds(ElementsAre("a1", "a2 line\nmore", "z1", "z2")));
  // One file.
  EXPECT_THAT(ReadFortunes(folder + "/zoo"), IsOkAndHolds(ElementsAre("z1", "z2")));
}

TEST(ReadFortunesTest, Errors) {
  const std::string missing = test::TempPath("no_such_corpus");
  EXPECT_THAT(ReadFortunes(missing),
              StatusIs(absl::StatusCode::kNotFound,
                       "no corpus " + missing +
                           "; give a folder of fortune files (Debian's fortunes package: "
                           "/usr/share/games/fortunes) or a text file"));
  const std::string empty = test::TempPath("empty_corpus");
  std::filesystem::create_directories(empty);
  std::ofstream(empty + "/only.dat") << "x";
  EXPECT_THAT(ReadFortunes(empty),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       empty + ": holds no documents (0 text files without an extension); give "
                               "a folder of fortune files or a text file"));
}

nlohmann::json Expected() {
  std::ifstream in(test::RunfilePath("tests/testdata/sentencepiece/expected.json"));
  return nlohmann::json::parse(in);
}

// torch.utils.data.random_split's parts, recorded by make_sentencepiece_fixtures.py.
TEST(SplitDocumentsTest, EqualsPythonsRandomSplit) {
  const nlohmann::json expected = Expected();
  ASSERT_EQ(expected["random_split"].size(), 3u);
  for (const nlohmann::json& split : expected["random_split"]) {
    std::vector<std::string> documents;
    for (int i = 0; i < split["n"].get<int>(); ++i) documents.push_back(std::to_string(i));
    absl::StatusOr<std::vector<std::vector<std::string>>> parts = SplitDocuments(
        documents, split["seed"].get<uint64_t>(), split["fractions"].get<std::vector<double>>());
    ASSERT_THAT(parts, IsOk());
    ASSERT_EQ(parts->size(), split["parts"].size());
    for (size_t p = 0; p < parts->size(); ++p) {
      std::vector<std::string> want;
      for (int i : split["parts"][p].get<std::vector<int>>()) want.push_back(std::to_string(i));
      EXPECT_EQ((*parts)[p], want) << "seed " << split["seed"] << " part " << p;
    }
  }
}

TEST(SplitDocumentsTest, FractionsMustSumToOne) {
  const std::vector<std::string> documents = {"a", "b", "c"};
  EXPECT_THAT(SplitDocuments(documents, 1, {0.5, 0.4}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "split fractions must sum to 1; got [0.5, 0.4]"));
  EXPECT_THAT(SplitDocuments(documents, 1, {1.5, -0.5}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "split fractions must each be in [0, 1]; got 1.5"));
  EXPECT_THAT(SplitDocuments(documents, 1, {}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SplitDocuments({}, 1, {0.9, 0.1}), IsOkAndHolds(ElementsAre(IsEmpty(), IsEmpty())));
}

// Debian's fortunes package, when installed: the document count Python's reader found.
TEST(ReadFortunesTest, TheFortunesCorpus) {
  const nlohmann::json expected = Expected();
  const std::string corpus = expected["corpus"];
  if (!std::filesystem::exists(corpus)) GTEST_SKIP() << corpus << " (apt-get install fortunes)";
  absl::StatusOr<std::vector<std::string>> documents = ReadFortunes(corpus);
  ASSERT_THAT(documents, IsOk());
  EXPECT_EQ(documents->size(), expected["corpus_documents"].get<size_t>());
  size_t bytes = 0;
  for (const std::string& d : *documents) bytes += d.size();
  EXPECT_EQ(bytes, expected["corpus_bytes"].get<size_t>());
}

}  // namespace
}  // namespace kd
