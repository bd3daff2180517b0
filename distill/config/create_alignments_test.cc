// CreateAlignments against what silverspoon-kd's own create_alignments made of the same
// patterns on the same module paths (tests/testdata/make_create_alignments_fixtures.py), and its
// errors.
#include "distill/config/create_alignments.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "distill/config/feature_distillation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::SizeIs;

using Pairs = std::vector<std::pair<std::string, std::string>>;

Pairs PairsOf(const FeatureDistillationConfig& config) {
  Pairs pairs;
  for (const AlignmentConfig& a : config.alignments()) {
    pairs.emplace_back(a.teacher().path(), a.student().path());
  }
  return pairs;
}

TEST(CreateAlignmentsTest, MakesSilverspoonKdsPairs) {
  std::ifstream in(test::FixturePath("create_alignments.json"));
  ASSERT_TRUE(in.good());
  const nlohmann::json fixture = nlohmann::json::parse(in);
  const auto paths = fixture.at("paths");
  const std::vector<std::string> teacher = paths.at("llama").get<std::vector<std::string>>();
  ASSERT_THAT(fixture.at("cases"), SizeIs(10));
  for (const nlohmann::json& c : fixture.at("cases")) {
    SCOPED_TRACE(c.dump());
    FeatureDistillationConfig config;
    CreateAlignmentsConfig& entry = *config.add_create_alignments();
    if (c.contains("modules")) {
      for (const std::string m : c.at("modules")) entry.add_modules(m);
    } else {
      for (const nlohmann::json& pair : c.at("module_map")) {
        ModulePatternPair& p = *entry.add_module_map();
        p.set_teacher(pair.at(0).get<std::string>());
        p.set_student(pair.at(1).get<std::string>());
      }
    }
    EXPECT_THAT(CreateAlignmentsErrors(config), IsEmpty());
    const absl::StatusOr<FeatureDistillationConfig> made = CreateAlignments(
        config, teacher,
        paths.at(c.at("student").get<std::string>()).get<std::vector<std::string>>());
    if (c.contains("raises")) {
      EXPECT_THAT(made, StatusIs(absl::StatusCode::kInvalidArgument));
      continue;
    }
    ASSERT_THAT(made, IsOk());
    EXPECT_THAT(made->create_alignments(), IsEmpty());
    EXPECT_EQ(PairsOf(*made), c.at("pairs").get<Pairs>());
  }
}

TEST(CreateAlignmentsTest, EntriesFollowTheGivenAlignmentsWithTheirOptions) {
  FeatureDistillationConfig config;
  AlignmentConfig& given = *config.add_alignments();
  given.mutable_teacher()->set_path("a");
  given.mutable_student()->set_path("a");
  CreateAlignmentsConfig& entry = *config.add_create_alignments();
  entry.add_modules("^b\\.\\d$");
  entry.set_loss("cosine");
  entry.set_output_selector_index(0);
  entry.set_auto_projector(false);
  Kwarg& kwarg = *entry.add_loss_kwargs();
  kwarg.set_name("reduction");
  kwarg.set_str("sum");
  const absl::StatusOr<FeatureDistillationConfig> made =
      CreateAlignments(config, {"", "a", "b", "b.0", "b.1", "b.10"}, {"", "a", "b", "b.0", "b.1"});
  ASSERT_THAT(made, IsOk());
  EXPECT_THAT(PairsOf(*made), ElementsAre(Pair("a", "a"), Pair("b.0", "b.0"), Pair("b.1", "b.1")));
  const AlignmentConfig& b0 = made->alignments(1);
  EXPECT_EQ(b0.loss(), "cosine");
  EXPECT_EQ(b0.teacher().element(), 0);
  EXPECT_EQ(b0.student().element(), 0);
  EXPECT_FALSE(AutoProjector(b0));
  ASSERT_THAT(b0.loss_kwargs(), SizeIs(1));
  EXPECT_EQ(b0.loss_kwargs(0).str(), "sum");
  EXPECT_FALSE(made->alignments(0).teacher().has_element());
}

TEST(CreateAlignmentsTest, RefusesBadPatternsNamingTheField) {
  FeatureDistillationConfig config;
  config.add_create_alignments();  // neither modules nor module_map
  config.add_create_alignments()->add_modules("layers.(");
  ModulePatternPair& named = *config.add_create_alignments()->add_module_map();
  named.set_teacher("layers\\.(?P<i>\\d+)");
  named.set_student("layers.\\1");
  ModulePatternPair& escape = *config.add_create_alignments()->add_module_map();
  escape.set_teacher("layers\\.(\\d+)");
  escape.set_student("layers.\\1\\q");
  const std::vector<std::string> errors = CreateAlignmentsErrors(config);
  ASSERT_THAT(errors, SizeIs(4));
  EXPECT_THAT(errors[0], HasSubstr("create_alignments[0]: give `modules`"));
  EXPECT_THAT(errors[1], HasSubstr("create_alignments[1].modules[0]: \"layers.(\" is not a "
                                   "regular expression"));
  EXPECT_THAT(errors[2], HasSubstr("create_alignments[2].module_map[0].teacher:"));
  EXPECT_THAT(errors[3], HasSubstr("create_alignments[3].module_map[0].student:"));
  EXPECT_THAT(errors[3], HasSubstr("bad escape \\q"));
  // The stage's own check counts create_alignments as alignments, and reports these.
  const std::vector<std::string> stage_errors = FeatureDistillationErrors(config, false);
  EXPECT_THAT(stage_errors, SizeIs(4));
}

TEST(CreateAlignmentsTest, ATeacherPatternThatFindsNothingIsAnError) {
  // silverspoon-kd skips a module_map pattern that finds nothing (it raises only when no pattern
  // finds any); libkd names it, since a pattern that finds nothing is a typo.
  FeatureDistillationConfig config;
  ModulePatternPair& found = *config.add_create_alignments()->add_module_map();
  found.set_teacher("^a$");
  found.set_student("a");
  ModulePatternPair& typo = *config.mutable_create_alignments(0)->add_module_map();
  typo.set_teacher("^lyaer$");
  typo.set_student("a");
  const absl::StatusOr<FeatureDistillationConfig> made =
      CreateAlignments(config, {"", "a", "layer"}, {"", "a"});
  EXPECT_THAT(made, StatusIs(absl::StatusCode::kInvalidArgument,
                             HasSubstr("create_alignments[0].module_map[1].teacher: no teacher "
                                       "module path has \"^lyaer$\" in it")));
}

}  // namespace
}  // namespace kd
