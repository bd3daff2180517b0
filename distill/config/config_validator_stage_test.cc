// The checks of a stage's models, loss terms and optimizer against what the stage records
// (distill/config/internal/stage_checks), through ValidateConfig.
#include <string>
#include <vector>

#include "distill/config/config_validator.h"
#include "distill/config/testing/validator_test_fixture.h"
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
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

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

// `element` picks from a recorded tuple: not from the targets or a parameter, never negative.
TEST(ConfigValidatorTest, AnElementIsPickedFromRecordedValuesOnly) {
  const Lines lines = Replace(kBase, 21, {R"(      inputs { arg: "targets" source: TARGETS element: 0 })"});
  EXPECT_THAT(Validate(lines),
              ElementsAre(At(lines, 21, "element") +
                          "element picks a value of a recorded tuple or list: not here"));
  const Lines negative =
      Replace(kBase, 25, {R"(      inputs { arg: "student" source: STUDENT path: "layer2" element: -1 })"});
  EXPECT_THAT(Validate(negative),
              ElementsAre(At(negative, 25, "element") + "element must be >= 0, got -1"));
}

// `key` picks an entry of a recorded dict (a model's or a module's): not from the targets.
TEST(ConfigValidatorTest, AKeyIsPickedFromRecordedValuesOnly) {
  const Lines lines = Replace(kBase, 21, {R"(      inputs { arg: "targets" source: TARGETS key: "x" })"});
  EXPECT_THAT(Validate(lines),
              ElementsAre(At(lines, 21, "key") + "key picks an entry of a recorded dict: not here"));
  const Lines fine =
      Replace(kBase, 25, {R"(      inputs { arg: "student" source: STUDENT path: "layer2" key: "h" })"});
  EXPECT_THAT(Validate(fine), ElementsAre());
}

// A BATCH input names a key of the batch's supplementary dict, and nothing else.
TEST(ConfigValidatorTest, BatchInputsNameASuppKey) {
  EXPECT_THAT(
      Validate(Replace(kBase, 21, {R"(      inputs { arg: "targets" source: BATCH path: "indices" })"})),
      IsEmpty());
  const Lines unnamed = Replace(kBase, 21, {R"(      inputs { arg: "targets" source: BATCH })"});
  EXPECT_THAT(Validate(unnamed),
              ElementsAre(At(unnamed, 21, "inputs") +
                          "missing required field \"path\" in IoRef (the batch's supplementary key, e.g. "
                          "\"indices\")"));
  const Lines with_io = Replace(
      kBase, 21, {R"(      inputs { arg: "targets" source: BATCH path: "indices" io: INPUT })"});
  EXPECT_THAT(Validate(with_io), ElementsAre(At(with_io, 21, "io") + "a BATCH input has no io"));
}

TEST(ConfigValidatorTest, AWarmUpIsNotNegative) {
  const Lines lines = Replace(kBase, 24, {R"(      name: "hint" key: "MSELoss" warmup_epochs: -1)"});
  EXPECT_THAT(Validate(lines),
              ElementsAre(At(lines, 24, "warmup_epochs") + "warmup_epochs must be >= 0, got -1"));
}

// torchdistill's `sequential` stage models: module paths, each once; its adaptation layers are
// refused with what to use instead.
TEST(ConfigValidatorTest, SequentialProblems) {
  const Lines lines =
      Replace(kBase, 11,
              {R"(  student {)", R"(    sequential: "layer1" sequential: "+adapter")",
               R"(    sequential: "" sequential: "layer1" sequential: "layer1..0")",
               R"(    forward_hooks { module_path: "layer2" requires_output: true })", R"(  })"});
  EXPECT_THAT(
      Validate(lines),
      ElementsAre(At(lines, 12, "sequential", 2) +
                      "torchdistill's adaptation layers (\"+adapter\") are not supported in "
                      "sequential: add the layer as one of this model's auxiliary_modules on the "
                      "recorded value it adapts",
                  At(lines, 13, "sequential") +
                      "\"\" is the whole model, not a module of it: leave sequential empty to "
                      "run the whole model",
                  At(lines, 13, "sequential", 2) + "duplicate sequential module \"layer1\"",
                  HasSubstr("layer1..0")));
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

// Auxiliary modules run in their order, so one reads hooked values and the outputs of those
// before it (knowledge review's fusions chain), at most three inputs, each the model's own
// (`source` may be left out).
TEST(ConfigValidatorTest, AuxiliaryModulesReadEarlierOnes) {
  const Lines chained = Replace(
      kBase, 11,
      {R"(  student {)", R"(    forward_hooks { module_path: "layer2" requires_output: true })",
       R"(    auxiliary_modules { name: "a" key: "conv_connector")",
       R"(                        input { source: STUDENT path: "layer2" })",
       R"(                        extra_inputs { path: "b" element: 1 } })",
       R"(    auxiliary_modules { name: "b" key: "conv_connector" input { path: "b" })",
       R"(                        extra_inputs { path: "a" element: 1 })",
       R"(                        extra_inputs { source: TEACHER path: "layer2" })",
       R"(                        extra_inputs { path: "a" } })",
       R"(  })"});
  EXPECT_THAT(
      Validate(chained),
      ElementsAre(At(chained, 15, "path") +
                      "auxiliary module \"b\" runs after this one: an auxiliary module reads the "
                      "outputs of those listed before it",
                  At(chained, 16, "path") +
                      "auxiliary module \"b\" is this one: an auxiliary module reads the "
                      "outputs of those listed before it",
                  At(chained, 18, "source") +
                      "an auxiliary module of the student reads the student's values: source "
                      "STUDENT",
                  At(chained, 19, "extra_inputs") +
                      "an auxiliary module takes at most three inputs"));
}

// An AOTInductor package is a teacher with its weights compiled in: hooks are checked against
// what it exported when it loads; training it, trimming it, loading or saving its weights and
// using it as the student are refused where they are written.
TEST(ConfigValidatorTest, AnAotiPackageTeacherOnlyRuns) {
  const Lines package = Replace(kBase, 4, {R"(teacher { aoti_package: "teacher.pt2" })"});
  EXPECT_THAT(Validate(package), IsEmpty());  // its hook on layer2 is checked at load
  const std::string why =
      "the teacher is an AOTInductor package (teacher.aoti_package: its weights compiled in)";
  const Lines trains =
      Replace(package, 10, {R"(  teacher { forward_hooks { module_path: "layer2" requires_output: true })",
                            R"(            requires_grad: true sequential: "layer1" })"});
  EXPECT_THAT(Validate(trains),
              ElementsAre(At(trains, 11, "requires_grad") + why + ": it cannot train",
                          At(trains, 11, "sequential") + why + ": it runs whole"));
  const Lines weights = Replace(
      kBase, 4, {R"(teacher { aoti_package: "teacher.pt2" src_ckpt: "w.pt" dst_ckpt: "out.pt" })"});
  EXPECT_THAT(
      Validate(weights),
      ElementsAre(At(weights, 4, "src_ckpt") +
                      "an AOTInductor package has its weights compiled in: drop src_ckpt (export "
                      "the weights you want)",
                  At(weights, 4, "dst_ckpt") +
                      "an AOTInductor package has its weights compiled in: drop dst_ckpt (export "
                      "the weights you want)"));
  const Lines student = Replace(kBase, 5, {R"(student { aoti_package: "student.pt2" })"});
  EXPECT_THAT(Validate(student),
              Contains(At(student, 5, "aoti_package") +
                       "an AOTInductor package is for the teacher: the student trains (give "
                       "torchscript or native)"));
}

// A teacher optimized for inference has no parameters and no submodules: what a config asks of
// it beyond its output is named where it is written.
TEST(ConfigValidatorTest, ATeacherOptimizedForInferenceOnlyRuns) {
  const std::string why =
      "the teacher is optimized for inference (teacher.optimize_for_inference: no parameters, "
      "its submodules inlined)";
  const Lines optimized =
      Replace(kBase, 4, {R"(teacher { torchscript: "teacher.pt" optimize_for_inference: true })"});
  EXPECT_THAT(Validate(optimized),
              ElementsAre(At(optimized, 10, "module_path") + why +
                          ": only its output (module_path \"\") can be hooked, not \"layer2\"; "
                          "drop the hook or optimize_for_inference"));
  // Hooked at its output only, the base config is valid.
  const Lines output_only = Replace(
      optimized, 10, {R"(  teacher { forward_hooks { module_path: "" requires_output: true } })"});
  const Lines valid =
      Replace(output_only, 26, {R"(      inputs { arg: "teacher" source: TEACHER })"});
  EXPECT_THAT(Validate(valid), IsEmpty());
  // Training it, wrapping it, a parameter group of it, frozen modules on it; an auxiliary module
  // reading its output is fine.
  const Lines trains = Replace(
      valid, 10,
      {R"(  teacher { requires_grad: true wrapper: DISTRIBUTED_DATA_PARALLEL frozen_modules: "fc")",
       R"(            auxiliary_modules { name: "a" key: "conv_connector" input { source: TEACHER } } })"});
  const Lines grouped = Replace(
      trains, 13,
      {R"(  optimizer { key: "SGD" kwargs { name: "lr" number: 0.1 } param_groups { model: TEACHER } })"});
  EXPECT_THAT(Validate(grouped),
              ElementsAre(At(grouped, 10, "requires_grad") + why + ": it cannot train",
                          At(grouped, 10, "wrapper") + why + ": it is not wrapped",
                          At(grouped, 10, "frozen_modules") + why + ": it has no modules to freeze",
                          At(grouped, 13, "model") + why + ": it has no parameters to optimize"));
  // Only a TorchScript teacher, with nothing to save; never the student.
  const Lines native = Replace(
      valid, 4,
      {R"(teacher { native { key: "fashion_cnn" } optimize_for_inference: true dst_ckpt: "t.pt" })"});
  const Lines student = Replace(
      native, 5, {R"(student { native { key: "fashion_cnn" } optimize_for_inference: true })"});
  EXPECT_THAT(
      Validate(student),
      ElementsAre(At(student, 4, "optimize_for_inference") +
                      "optimize_for_inference needs a TorchScript teacher (torch::jit::freeze "
                      "works on TorchScript modules); export it with torch.jit.script, or drop the "
                      "flag",
                  At(student, 4, "dst_ckpt") +
                      "a teacher optimized for inference has no parameters to save: drop dst_ckpt "
                      "or optimize_for_inference",
                  At(student, 5, "optimize_for_inference") +
                      "optimize_for_inference is for the teacher: the student trains"));
}

// A stage model's src_ckpt is read when the stage starts: with check_files it must be readable,
// unless an earlier stage's dst_ckpt writes it (a hint stage's student read by the next stage);
// a stage's dst_ckpt must not overwrite what the run reads.
TEST(ConfigValidatorStageTest, StageCheckpointsAreFilesReadOrWritten) {
  const Lines missing = Replace(kBase, 11, {R"(  student { src_ckpt: "/nonexistent/s.pt" })"});
  EXPECT_THAT(Validate(missing, {.check_files = true}),
              Contains(At(missing, 11, "src_ckpt") +
                       "cannot read src_ckpt \"/nonexistent/s.pt\""));
  // Two stages: the first writes what the second reads.
  Lines chained = Replace(kBase, 6, {R"(stages {)", R"(  name: "hint")"});
  chained = Replace(chained, 12, {R"(  student { forward_hooks { module_path: "layer2" requires_output: true } dst_ckpt: "/tmp/libkd_hint_student.pt" })"});
  chained = Insert(chained, 31, {R"(stages { name: "kd" num_epochs: 1 student { src_ckpt: "/tmp/libkd_hint_student.pt" } criterion { terms { key: "KDLoss" kwargs { name: "temperature" number: 4 } inputs { arg: "student" source: STUDENT } inputs { arg: "teacher" source: TEACHER } } } })"});
  // (teacher.pt is not there either: with check_files that is the one problem.)
  EXPECT_THAT(Validate(chained, {.check_files = true}),
              ElementsAre(At(chained, 4, "torchscript") + "cannot read torchscript \"teacher.pt\""));
  const Lines overwrites =
      Replace(kBase, 11, {R"(  student { dst_ckpt: "teacher.pt" })"});
  EXPECT_THAT(Validate(overwrites),
              Contains(HasSubstr("student.dst_ckpt \"" )));
}

// teacher_cache mode ON where the config shows it cannot be exact: refused at its mode, saying
// why and the fix; AUTO (the default) is never refused; a negative memory cap is.
TEST(ConfigValidatorTest, TeacherCacheOnWhereItCannotBeExact) {
  const Lines fine = Insert(kBase, 29, {R"(  teacher_cache { mode: ON memory_mib: 64 })"});
  EXPECT_THAT(Validate(fine), IsEmpty());
  const Lines trains = Replace(
      fine, 10,
      {R"(  teacher { requires_grad: true forward_hooks { module_path: "layer2" requires_output: true } })"});
  EXPECT_THAT(Validate(trains),
              Contains(At(trains, 29, "mode") +
                       "teacher_cache mode ON, but the cache cannot be exact: the teacher trains "
                       "in this stage (teacher.requires_grad); set mode AUTO or OFF"));
  const Lines accumulates = Replace(
      fine, 10,
      {R"(  teacher { forward_hooks { module_path: "layer2" requires_output: true accumulates: true } })"});
  EXPECT_THAT(Validate(accumulates),
              Contains(HasSubstr("the teacher's hook on \"layer2\" accumulates calls")));
  const Lines wrapped = Replace(
      fine, 2,
      {R"(datasets { id: "train" key: "fashion_mnist" wrapper { key: "SSKDDatasetWrapper" } })"});
  EXPECT_THAT(Validate(wrapped),
              Contains(At(wrapped, 29, "mode") +
                       "teacher_cache mode ON, but the cache cannot be exact: the training "
                       "dataset \"train\" is wrapped (SSKDDatasetWrapper): its samples are not "
                       "known from an index and transform; set mode AUTO or OFF"));
  const Lines automatic = Replace(trains, 29, {R"(  teacher_cache { mode: AUTO })"});
  EXPECT_THAT(Validate(automatic), IsEmpty());
  const Lines overlap = Replace(trains, 29, {R"(  overlap_teacher: ON)"});
  EXPECT_THAT(Validate(overlap),
              ElementsAre(At(overlap, 29, "overlap_teacher") +
                          "overlap_teacher ON, but the overlap would not give the sequential "
                          "run: the teacher trains in this stage (teacher.requires_grad); set "
                          "AUTO or OFF"));
  const Lines negative = Replace(fine, 29, {R"(  teacher_cache { memory_mib: -1 })"});
  EXPECT_THAT(Validate(negative), ElementsAre(At(negative, 29, "memory_mib") +
                                              "memory_mib must be >= 0, got -1"));
  const Lines behind = Replace(fine, 29, {R"(  teacher_cache { lookahead_rows: -4 })"});
  EXPECT_THAT(Validate(behind), ElementsAre(At(behind, 29, "lookahead_rows") +
                                            "lookahead_rows must be >= 0, got -4"));
}

}  // namespace
}  // namespace kd
