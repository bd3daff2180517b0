// The checks of a stage's models, loss terms and optimizer against what the stage records
// (distill/config/internal/stage_checks), through ValidateConfig.
#include <string>
#include <vector>

#include "distill/config/config_validator.h"
#include "distill/config/internal/validator_test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kd {
namespace {

using test::At;
using test::Insert;
using test::kBase;
using test::Lines;
using test::Replace;
using test::Validate;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(ConfigValidatorTest, CriterionInputsThatNoHookRecords) {
  const Lines near =
      Replace(kBase, 25, {R"(      inputs { arg: "student" source: STUDENT path: "layer3" })"});
  EXPECT_THAT(Validate(near),
              ElementsAre(At(near, 25, "path") +
                          "the student's io[\"layer3\"][\"output\"] is not recorded in this stage; "
                          "did you mean \"layer2\"?"));
  const Lines input = Replace(
      kBase, 26, {R"(      inputs { arg: "teacher" source: TEACHER path: "layer2" io: INPUT })"});
  EXPECT_THAT(Validate(input),
              ElementsAre(At(input, 26, "path") +
                          "the teacher's io[\"layer2\"][\"input\"] is not recorded in this stage: "
                          "add forward_hooks { module_path: \"layer2\" requires_input: true } to "
                          "the stage's teacher"));
  const Lines root_input =
      Replace(kBase, 19, {R"(      inputs { arg: "student" source: STUDENT io: INPUT })"});
  EXPECT_THAT(Validate(root_input),
              ElementsAre(At(root_input, 19, "inputs") +
                          "the student's io[\"\" (root)][\"input\"] is not recorded in this stage: "
                          "add forward_hooks { module_path: \"\" requires_input: true } to the "
                          "stage's student"));
}

// A loss may read a model's parameter by name (io: PARAMETER): no hook records it, so only the
// name's presence is checked here (the model checks the name when the run loads it); the
// targets have no io, and auxiliary modules read recorded values only.
TEST(ConfigValidatorTest, ParameterReferences) {
  EXPECT_THAT(
      Validate(Replace(
          kBase, 26,
          {R"(      inputs { arg: "w" source: TEACHER path: "fc.weight" io: PARAMETER })"})),
      IsEmpty());
  const Lines unnamed =
      Replace(kBase, 26, {R"(      inputs { arg: "w" source: TEACHER io: PARAMETER })"});
  EXPECT_THAT(Validate(unnamed),
              ElementsAre(At(unnamed, 26, "inputs") +
                          "missing required field \"path\" in IoRef (the parameter's or "
                          "buffer's name, e.g. \"fc.weight\")"));
  const Lines targets =
      Replace(kBase, 21, {R"(      inputs { arg: "targets" source: TARGETS io: PARAMETER })"});
  EXPECT_THAT(Validate(targets),
              ElementsAre(At(targets, 21, "io") + "a TARGETS input has no path or io"));
}

TEST(ConfigValidatorTest, EveryProblemOfARunWithoutTeacherAtOnce) {
  const Lines lines = Replace(kBase, 4, {});  // no teacher; the stage still uses one
  EXPECT_THAT(
      Validate(lines),
      ElementsAre(At(lines, 9, "teacher") + "this stage configures a teacher, but the run has none "
                                            "(DistillConfig.teacher is unset)",
                  At(lines, 19, "source") +
                      "reads the teacher, but the run has none (DistillConfig.teacher is unset)",
                  At(lines, 25, "source") +
                      "reads the teacher, but the run has none (DistillConfig.teacher is unset)"));
}

TEST(ConfigValidatorTest, HookProblems) {
  const Lines lines = Replace(
      kBase, 11,
      {R"(  student {)", R"(    forward_hooks { module_path: "layer2" requires_output: true })",
       R"(    forward_hooks { module_path: "layer2" requires_input: true })",
       R"(    forward_hooks { module_path: "fc" })",
       R"(    forward_hooks { module_path: "layer1" requires_output: true stacks_accumulated: true })",
       R"(    frozen_modules: "layer1" frozen_modules: "layer1")",
       R"(    find_unused_parameters: true)", R"(  })"});
  EXPECT_THAT(
      Validate(lines),
      ElementsAre(At(lines, 13, "forward_hooks") +
                      "duplicate forward hook on module \"layer2\" (first at 12:5)",
                  At(lines, 14, "forward_hooks") +
                      "forward hook on module \"fc\" records nothing: set requires_input "
                      "or requires_output",
                  At(lines, 15, "stacks_accumulated") + "stacks_accumulated needs accumulates",
                  At(lines, 16, "frozen_modules", 2) + "duplicate frozen module \"layer1\"",
                  At(lines, 17, "find_unused_parameters") +
                      "find_unused_parameters needs wrapper: DISTRIBUTED_DATA_PARALLEL"));
}

TEST(ConfigValidatorTest, AuxiliaryModulesFeedTheCriterion) {
  const Lines lines = Replace(
      kBase, 11,
      {R"(  student {)", R"(    forward_hooks { module_path: "layer2" requires_output: true })",
       R"(    auxiliary_modules { name: "connector" key: "conv_connector")",
       R"(                        input { source: STUDENT path: "layer2" } })",
       R"(    auxiliary_modules { name: "bad" key: "conv_connector" input { source: TEACHER } })",
       R"(  })"});
  const Lines reads =
      Replace(lines, 30, {R"(      inputs { arg: "student" source: STUDENT path: "connector" })"});
  EXPECT_THAT(Validate(reads),
              ElementsAre(At(reads, 15, "source") +
                          "an auxiliary module of the student reads the student's values: source "
                          "STUDENT"));
}

}  // namespace
}  // namespace kd
