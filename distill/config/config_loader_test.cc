#include "distill/config/config_loader.h"

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "base/file_util.h"
#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Lines joined with newlines: line N of the text is lines[N - 1].
std::string Lines(const std::vector<std::string>& lines) { return absl::StrJoin(lines, "\n"); }

std::vector<std::string> Strings(const std::vector<ConfigProblem>& problems) {
  std::vector<std::string> out;
  for (const ConfigProblem& p : problems) out.push_back(p.ToString());
  return out;
}

MATCHER_P2(IsAt, line, column, "") { return arg.line == line && arg.column == column; }

TEST(ConfigLoaderTest, KeepsThePositionOfEveryField) {
  auto loaded = ParseConfig(Lines({
                                "student { torchscript: \"s.pt\" }",  // 1
                                "train {",                            // 2
                                "  num_epochs: 3",                    // 3
                                "  criterion {",                      // 4
                                "    terms { key: \"a\" }",           // 5
                                "    terms {",                        // 6
                                "       key: \"b\"",                  // 7
                                "    }",                              // 8
                                "  }",                                // 9
                                "}",                                  // 10
                            }),
                            "c.pbtxt");
  ASSERT_THAT(loaded, IsOk());
  const ConfigLocator root = loaded->Root();
  EXPECT_THAT(root.self(), IsAt(1, 1));
  EXPECT_THAT(root.Of("student"), IsAt(1, 1));
  EXPECT_THAT(root.Nested("student").Of("torchscript"), IsAt(1, 11));
  const ConfigLocator train = root.Nested("train");
  EXPECT_THAT(train.self(), IsAt(2, 1));
  EXPECT_THAT(train.Of("num_epochs"), IsAt(3, 3));
  const ConfigLocator criterion = train.Nested("criterion");
  EXPECT_THAT(criterion.Of("terms", 0), IsAt(5, 5));
  EXPECT_THAT(criterion.Nested("terms", 0).Of("key"), IsAt(5, 13));
  EXPECT_THAT(criterion.Nested("terms", 1).Of("key"), IsAt(7, 8));
  // Absent fields point at their message.
  EXPECT_FALSE(train.Written("optimizer"));
  EXPECT_THAT(train.Of("optimizer"), IsAt(2, 1));
  EXPECT_THAT(train.Nested("optimizer").Of("key"), IsAt(2, 1));
  EXPECT_EQ(train.type_name(), "StageConfig");
  EXPECT_THAT(loaded->parse_problems, IsEmpty());
  EXPECT_EQ(loaded->config.train().criterion().terms(1).key(), "b");
}

TEST(ConfigLoaderTest, UnknownFieldsAreKeptAsProblemsAtTheirNames) {
  auto loaded = ParseConfig(Lines({
                                "student { torchscript: \"s.pt\" }",         // 1
                                "train {",                                   // 2
                                "  num_epocs: 3",                            // 3
                                "  criterion {",                             // 4
                                "    terms { key: \"kd\" wieght : 0.5 }",    // 5
                                "    terms { key: \"ce\" xyzzy { a: 1 } }",  // 6
                                "  }",                                       // 7
                                "}",                                         // 8
                            }),
                            "c.pbtxt");
  ASSERT_THAT(loaded, IsOk());
  EXPECT_THAT(
      Strings(loaded->parse_problems),
      ElementsAre(
          "c.pbtxt:3:3: unknown field \"num_epocs\" in StageConfig; did you mean \"num_epochs\"?",
          "c.pbtxt:5:23: unknown field \"wieght\" in LossTermConfig; did you mean \"weight\"?",
          "c.pbtxt:6:23: unknown field \"xyzzy\" in LossTermConfig; valid: name, key, kwargs, "
          "weight, inputs, warmup_epochs, group"));
  // The rest is parsed.
  EXPECT_EQ(loaded->config.train().criterion().terms_size(), 2);
}

TEST(ConfigLoaderTest, SyntaxErrorsFailWithTheirPosition) {
  EXPECT_THAT(
      ParseConfig(Lines({
                      "train {",                // 1
                      "  num_epochs: \"ten\"",  // 2
                      "}",
                  }),
                  "c.pbtxt"),
      StatusIs(absl::StatusCode::kInvalidArgument, "c.pbtxt:2:15: Expected integer, got: \"ten\""));
  EXPECT_THAT(ParseConfig("train { num_epochs: 1", "c.pbtxt"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("c.pbtxt:1:22: ")));
}

TEST(ConfigLoaderTest, UnknownEnumValuesNameTheNearest) {
  EXPECT_THAT(ParseConfig(Lines({
                              "train {",                                               // 1
                              "  criterion { terms { inputs { source: STUDNET } } }",  // 2
                              "}",
                          }),
                          "c.pbtxt"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "c.pbtxt:2:40: unknown value \"STUDNET\" for field \"source\"; did you "
                       "mean \"STUDENT\"?"));
  EXPECT_THAT(ParseConfig("train { student { wrapper: DDP } }", "c.pbtxt"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "c.pbtxt:1:28: unknown value \"DDP\" for field \"wrapper\"; valid: "
                       "NO_WRAPPER, DISTRIBUTED_DATA_PARALLEL"));
}

TEST(ConfigLoaderTest, UnknownFieldsBeforeASyntaxErrorAreReportedWithIt) {
  EXPECT_THAT(ParseConfig(Lines({"studnet { }", "train { num_epochs: x }"}), "c.pbtxt"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "c.pbtxt:1:1: unknown field \"studnet\" in DistillConfig; did you mean "
                       "\"student\"?\nc.pbtxt:2:21: Expected integer, got: x"));
}

TEST(ConfigLoaderTest, LoadReadsTheFileAndNamesItAsGiven) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/run.pbtxt";
  ASSERT_THAT(WriteFileAtomically(path, "train { num_epochz: 1 }"), IsOk());
  auto loaded = LoadConfig(path, "configs/run.pbtxt");
  ASSERT_THAT(loaded, IsOk());
  EXPECT_THAT(Strings(loaded->parse_problems),
              ElementsAre("configs/run.pbtxt:1:9: unknown field \"num_epochz\" in StageConfig; "
                          "did you mean \"num_epochs\"?"));
  auto plain = LoadConfig(path);
  ASSERT_THAT(plain, IsOk());
  EXPECT_EQ(plain->file, path);
  EXPECT_THAT(LoadConfig("/nonexistent/run.pbtxt"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/run.pbtxt")));
}

// Found by a hostile user: a kwargs dict nested a few thousand levels deep overflowed the
// stack of protobuf's text parser.
TEST(ConfigLoaderTest, DeepNestingIsAnErrorNotACrash) {
  std::string text = "student { native { key: \"m\" ";
  for (int i = 0; i < 5000; ++i) text += "kwargs { name: \"a\" dict { ";
  for (int i = 0; i < 5000; ++i) text += "} } ";
  text += "} }";
  absl::StatusOr<LoadedConfig> loaded = ParseConfig(text, "deep.pbtxt");
  EXPECT_THAT(loaded, StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("nested more than 100 levels deep")));
  // Twenty levels are fine.
  std::string ok = "student { native { key: \"m\" ";
  for (int i = 0; i < 20; ++i) ok += "kwargs { name: \"a\" dict { ";
  for (int i = 0; i < 20; ++i) ok += "} } ";
  EXPECT_THAT(ParseConfig(ok + "} }", "ok.pbtxt"), IsOk());
}

TEST(ConfigLoaderTest, AnUnclosedBraceIsNamedWithItsLine) {
  EXPECT_THAT(ParseConfig(Lines({"student { torchscript: \"s.pt\" }",  // 1
                                 "train {",                              // 2
                                 "  num_epochs: 3",                      // 3
                                 "  optimizer { key: \"SGD\" }",        // 4
                                 "# a comment { does not count"}),       // 5
                          "c.pbtxt"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "c.pbtxt:5:29: the file ends inside the \"{\" opened at 2:7; close it "
                       "with \"}\""));
}

TEST(ConfigLoaderTest, AByteOrderMarkIsSkipped) {
  auto loaded = ParseConfig("\xEF\xBB\xBFtrain { num_epochs: 2 }", "bom.pbtxt");
  ASSERT_THAT(loaded, IsOk());
  EXPECT_EQ(loaded->config.train().num_epochs(), 2);
  EXPECT_THAT(loaded->Root().Nested("train").Of("num_epochs"), IsAt(1, 9));
}

TEST(ConfigLoaderTest, ProblemsWithoutAPositionNameTheFileOnly) {
  EXPECT_EQ((ConfigProblem{"c.pbtxt", {}, "empty"}).ToString(), "c.pbtxt: empty");
  EXPECT_EQ((ConfigProblem{"c.pbtxt", {3, 7}, "bad"}).ToString(), "c.pbtxt:3:7: bad");
}

}  // namespace
}  // namespace kd
