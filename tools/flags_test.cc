#include "tools/flags.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

// Flags of this program, defined under tools/ as a tool's are.
ABSL_FLAG(int, threads, 0, "threads");
ABSL_FLAG(std::string, config, "", "config");
ABSL_FLAG(bool, resume, false, "resume");

namespace kd {
namespace {

using ::testing::ElementsAre;

TEST(FlagFileTest, ReadsOneFlagALineSkippingCommentsAndBlanks) {
  EXPECT_THAT(
      ParseFlagFile("# run settings\n\n  --threads=2  \n--config=a.pbtxt\n--noresume\n", "f.flags"),
      IsOkAndHolds(ElementsAre("--threads=2", "--config=a.pbtxt", "--noresume")));
  EXPECT_THAT(ParseFlagFile("", "f.flags"), IsOkAndHolds(ElementsAre()));
}

TEST(FlagFileTest, ProblemsNameTheFileAndLine) {
  EXPECT_THAT(ParseFlagFile("--threads=2\n--confg=x\n", "f.flags"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "f.flags:2: unknown flag --confg; did you mean \"--config\"?"));
  EXPECT_THAT(ParseFlagFile("\n--threads=two\n", "f.flags"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "f.flags:2: --threads: Illegal value 'two' specified for flag 'threads'"));
  EXPECT_THAT(ParseFlagFile("--threads\n", "f.flags"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "f.flags:1: --threads needs a value: --threads=..."));
  EXPECT_THAT(ParseFlagFile("threads=2\n", "f.flags"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "f.flags:1: unexpected argument \"threads=2\": give every input as a "
                       "flag, --name=value (see --help)"));
  EXPECT_THAT(ParseFlagFile("--flagfile=g.flags\n", "f.flags"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "f.flags:1: a flag file cannot name another; give every file in the "
                       "first --flagfile=A,B"));
  EXPECT_THAT(ParseFlagFile("--help\n", "f.flags"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "f.flags:1: --help belongs on the command line, not in a flag file"));
}

TEST(FlagArgumentTest, ASeparateValueIsTaken) {
  const std::vector<std::string> args = {"--threads", "3", "--resume"};
  size_t i = 0;
  ASSERT_THAT(CheckFlagArgument(args, &i), IsOk());
  EXPECT_EQ(i, 1u);
  i = 2;
  EXPECT_THAT(CheckFlagArgument(args, &i), IsOk());
  EXPECT_TRUE(IsHelpFlag("--help"));
  EXPECT_TRUE(IsHelpFlag("-helpshort"));
  EXPECT_FALSE(IsHelpFlag("help"));
}

}  // namespace
}  // namespace kd
