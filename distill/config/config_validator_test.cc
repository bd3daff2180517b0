// The validator's walk over a config: field values, keys and kwargs, ranges, sections that
// need each other, the process functions. A stage's models, losses and optimizer:
// config_validator_stage_test.cc.
#include "distill/config/config_validator.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "distill/config/config_loader.h"
#include "distill/config/config_summary.h"
#include "distill/config/testing/validator_test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

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

TEST(ConfigValidatorTest, TheBaseConfigIsValid) { EXPECT_THAT(Validate(kBase), IsEmpty()); }

// Accepted without a word before (found by a hostile user): text that is not UTF-8, enum
// numbers outside the enum, two stages of one name, a module path with an empty component.
TEST(ConfigValidatorTest, NonUtf8TextIsAnError) {
  const Lines lines = Replace(kBase, 1, {"run { name: \"t\xff\xfe\" device: \"cpu\" }"});
  EXPECT_THAT(Validate(lines),
              ElementsAre(At(lines, 1, "name") +
                          "name is not valid UTF-8 text; write the config in UTF-8 (non-ASCII "
                          "bytes may also be written as \\ooo octal escapes of UTF-8)"));
  // Well-formed UTF-8 is fine, in kwargs too; a bad kwarg string is found there as well.
  EXPECT_THAT(Validate(Replace(kBase, 1, {"run { name: \"t\xc3\xa9\" device: \"cpu\" }"})),
              IsEmpty());
  const Lines kwarg =
      Replace(kBase, 2,
              {R"(datasets { id: "train" key: "fashion_mnist" kwargs { name: "split" str: ")"
               "\xc0\xaf"
               R"(" } })"});
  EXPECT_THAT(Validate(kwarg),
              ElementsAre(At(kwarg, 2, "str") +
                          "str is not valid UTF-8 text; write the config in UTF-8 (non-ASCII "
                          "bytes may also be written as \\ooo octal escapes of UTF-8)"));
}

TEST(ConfigValidatorTest, EnumNumbersOutsideTheEnum) {
  const Lines lines = Replace(kBase, 19, {R"(      inputs { arg: "student" source: 99 })"});
  EXPECT_THAT(Validate(lines),
              ElementsAre(At(lines, 19, "source") +
                          "source: 99 is not a value of Source; use one of SOURCE_UNSPECIFIED, "
                          "STUDENT, TEACHER, TARGETS, BATCH"));
}

TEST(ConfigValidatorTest, ModulePathWithAnEmptyComponent) {
  const Lines lines =
      Replace(kBase, 10,
              {R"(  teacher { forward_hooks { module_path: "layer2." requires_output: true } })"});
  EXPECT_THAT(Validate(lines),
              ::testing::Contains(At(lines, 10, "module_path") +
                                  "module path \"layer2.\" has an empty component (a leading, "
                                  "trailing or doubled \".\"); did you mean \"layer2\"?"));
}

TEST(ConfigValidatorTest, TwoStagesOfOneName) {
  // The base's train stage as stages[0], then a second stage; named stage0 (stages[0]'s default
  // name) or like the first.
  Lines lines = Replace(kBase, 6, {R"(stages {)"});
  lines = Insert(lines, 30,
                 {R"(stages { name: "stage0" num_epochs: 1)",
                  R"(  optimizer { key: "SGD" kwargs { name: "lr" number: 0.1 } })",
                  R"(  criterion { terms { key: "CrossEntropyLoss" } } })"});
  EXPECT_THAT(Validate(lines),
              ::testing::Contains(At(lines, 30, "name") +
                                  "duplicate stage name \"stage0\", also the name of the stage "
                                  "at 6:1; give each stage its own name"));
  lines[5] = R"(stages { name: "warmup")";
  lines[29] = R"(stages { name: "warmup" num_epochs: 1)";
  EXPECT_THAT(Validate(lines), ::testing::Contains(At(lines, 30, "name") +
                                                   "duplicate stage name \"warmup\", also the "
                                                   "name of the stage at 6:10; give each stage "
                                                   "its own name"));
  lines[29] = R"(stages { name: "cooldown" num_epochs: 1)";
  EXPECT_THAT(Validate(lines), ::testing::Not(::testing::Contains(HasSubstr("duplicate stage"))));
}

TEST(ConfigValidatorTest, MisspelledKwargNamesTheNearest) {
  const Lines lines = Replace(kBase, 18, {R"(      kwargs { name: "temprature" number: 4 })"});
  EXPECT_THAT(Validate(lines), ElementsAre(At(lines, 18, "name") +
                                           "unknown kwarg \"temprature\" for loss \"KDLoss\"; "
                                           "did you mean \"temperature\"?"));
}

TEST(ConfigValidatorTest, KwargOfTheWrongType) {
  const Lines lines = Replace(kBase, 18, {R"(      kwargs { name: "temperature" str: "4" })"});
  EXPECT_THAT(Validate(lines),
              ElementsAre(At(lines, 18, "name") +
                          "kwarg \"temperature\" for loss \"KDLoss\" must be a number, not a "
                          "string"));
}

TEST(ConfigValidatorTest, MisspelledFieldIsReportedWithTheRest) {
  const Lines lines = Replace(kBase, 16, {R"(      name: "kd" wieght: 0.5)"});
  const Lines both = Replace(lines, 7, {R"(  num_epochs: 0)"});
  EXPECT_THAT(Validate(both),
              ElementsAre(At(both, 7, "num_epochs") + "num_epochs must be >= 1, got 0",
                          At(both, 16, "wieght") +
                              "unknown field \"wieght\" in LossTermConfig; did you mean "
                              "\"weight\"?"));
}

TEST(ConfigValidatorTest, UnknownRegistryKeysNameTheNearestAndListTheRest) {
  const Lines lines = Replace(kBase, 17, {R"(      key: "KDLos")"});
  EXPECT_THAT(Validate(lines),
              ElementsAre(At(lines, 17, "key") +
                          "no loss \"KDLos\" is registered; did you mean \"KDLoss\"? registered: "
                          "CrossEntropyLoss, KDLoss, MSELoss"));
  const Lines model = Replace(kBase, 5, {R"(student { native { key: "fashion_nn" } })"});
  EXPECT_THAT(Validate(model),
              ElementsAre(At(model, 5, "key") +
                          "no model \"fashion_nn\" is registered; did you mean \"fashion_cnn\"? "
                          "registered: fashion_cnn"));
}

TEST(ConfigValidatorTest, UnknownDatasetId) {
  const Lines lines =
      Replace(kBase, 8, {R"(  train_data_loader { dataset_id: "trian" batch_size: 32 })"});
  EXPECT_THAT(Validate(lines),
              ElementsAre(At(lines, 8, "dataset_id") + "unknown dataset id \"trian\"; did you mean "
                                                       "\"train\"?"));
  const Lines far =
      Replace(kBase, 9, {R"(  val_data_loader { dataset_id: "test" batch_size: 64 })"});
  EXPECT_THAT(Validate(far), ElementsAre(At(far, 9, "dataset_id") +
                                         "unknown dataset id \"test\"; valid: train, val"));
}

TEST(ConfigValidatorTest, MissingRequiredFields) {
  const Lines lines = Replace(kBase, 7, {});  // no num_epochs
  EXPECT_THAT(Validate(lines), ElementsAre(At(lines, 6, "train") +
                                           "missing required field \"num_epochs\" in StageConfig"));
  const Lines no_student = Replace(kBase, 5, {});
  EXPECT_THAT(Validate(no_student),
              ElementsAre("t.pbtxt:1:1: missing required field \"student\" in DistillConfig"));
  const Lines no_source = Replace(kBase, 5, {R"(student { src_ckpt: "s.pt" })"});
  EXPECT_THAT(
      Validate(no_source),
      ElementsAre(At(no_source, 5, "student") +
                  "missing required field \"torchscript\", \"native\" or \"aoti_package\" in "
                  "ModelConfig"));
  Lines no_criterion(kBase.begin(), kBase.begin() + 13);  // up to the scheduler
  no_criterion.push_back("}");
  no_criterion.push_back(kBase[29]);
  EXPECT_THAT(Validate(no_criterion),
              ElementsAre(At(no_criterion, 6, "train") +
                          "missing required field \"criterion\" in StageConfig"));
  const Lines no_arg = Replace(kBase, 21, {R"(      inputs { source: TARGETS })"});
  EXPECT_THAT(Validate(no_arg),
              ElementsAre(At(no_arg, 21, "inputs") + "missing required field \"arg\" in IoRef"));
}

TEST(ConfigValidatorTest, ANegativeDistributedTimeoutIsNamed) {
  const Lines lines = Replace(kBase, 1, {R"(run { name: "t" distributed_timeout_s: -1 })"});
  EXPECT_THAT(Validate(lines), ElementsAre(At(lines, 1, "distributed_timeout_s") +
                                           "distributed_timeout_s must be >= 0, got -1"));
}

TEST(ConfigValidatorTest, OutOfRangeValues) {
  Lines lines = Replace(kBase, 1, {R"(run { name: "t" device: "gpu" log_every_n_steps: -5 })"});
  lines = Replace(
      lines, 8, {R"(  train_data_loader { dataset_id: "train" batch_size: -1 num_workers: -2 })"});
  lines =
      Replace(lines, 12, {R"(  optimizer { key: "SGD" max_grad_norm: -1 grad_accum_step: -2 })"});
  lines = Replace(lines, 13, {R"(  scheduler { key: "MultiStepLR" scheduling_step: -1 })"});
  lines = Replace(lines, 16, {R"(      name: "kd" weight: inf)"});
  EXPECT_THAT(
      Validate(lines),
      ElementsAre(At(lines, 1, "device") + "bad device \"gpu\": use cpu, cuda or cuda:N",
                  At(lines, 1, "log_every_n_steps") + "log_every_n_steps must be >= 0, got -5",
                  At(lines, 8, "batch_size") + "batch_size must be >= 1, got -1",
                  At(lines, 8, "num_workers") + "num_workers must be >= 0, got -2",
                  At(lines, 12, "max_grad_norm") + "max_grad_norm must be > 0, got -1",
                  At(lines, 12, "grad_accum_step") + "grad_accum_step must be >= 0, got -2",
                  At(lines, 13, "scheduling_step") + "scheduling_step must be >= 0, got -1",
                  At(lines, 16, "weight") + "weight must be finite, got inf"));
  const Lines subset = Replace(kBase, 2,
                               {R"(datasets { id: "train" key: "fashion_mnist" )"
                                R"(subset { start: -1 } } datasets { id: "v" key: "fashion_mnist" )"
                                R"(subset { start: 5 stop: 5 } })"});
  EXPECT_THAT(Validate(subset),
              ElementsAre(At(subset, 2, "start") + "start must be >= 0, got -1",
                          At(subset, 2, "stop") +
                              "stop must be > start (5), got 5; or 0 for the dataset's size"));
}

// SequentialLR and ChainedScheduler compose `schedulers`; the others take none, and a composed
// one has no scheduling_step of its own.
TEST(ConfigValidatorTest, ComposedSchedulers) {
  const Lines bare = Replace(kBase, 13, {R"(  scheduler { key: "SequentialLR" })"});
  // (This test's registry holds MultiStepLR alone.)
  EXPECT_THAT(
      Validate(bare),
      ElementsAre(At(bare, 13, "scheduler") +
                      "missing required field \"schedulers\" in SchedulerConfig (the "
                      "schedulers SequentialLR composes, in order)",
                  At(bare, 13, "key") + "no scheduler \"SequentialLR\" is registered; registered: "
                                        "MultiStepLR"));
  const Lines extra = Replace(
      kBase, 13,
      {R"(  scheduler { key: "MultiStepLR" schedulers { key: "MultiStepLR" scheduling_step: 2 } })"});
  EXPECT_THAT(Validate(extra),
              ElementsAre(At(extra, 13, "schedulers") +
                              "scheduler \"MultiStepLR\" composes no schedulers (only SequentialLR "
                              "and ChainedScheduler do): leave `schedulers` out",
                          At(extra, 13, "scheduling_step") +
                              "a composed scheduler steps with its SequentialLR or "
                              "ChainedScheduler: leave scheduling_step out here"));
}

// The profiler's schedule (torch.profiler.schedule's ranges) and the leak detection's options,
// each at its value.
TEST(ConfigValidatorTest, ProfilerAndLeakDetectionValues) {
  Lines lines = Replace(kBase, 30,
                        {R"(evaluation { metrics { key: "accuracy" } memory_leak_detection { )"
                         R"(diff_between_batches: [3, 2] snapshot_at_batch: 4 )"
                         R"(log_every_n_batches: -1 } })",
                         R"(profiler { wait: -1 warmup: 2 active: 0 repeat: -3 skip_first: -4 })"});
  EXPECT_THAT(
      Validate(lines),
      ElementsAre(At(lines, 30, "diff_between_batches") +
                      "diff_between_batches must be two batches [first, second] with 1 <= first "
                      "< second, got [3, 2]",
                  At(lines, 30, "snapshot_at_batch") +
                      "snapshot_path is required when snapshot_at_batch is set",
                  At(lines, 30, "log_every_n_batches") + "log_every_n_batches must be >= 0, got -1",
                  At(lines, 31, "wait") + "wait must be >= 0, got -1",
                  At(lines, 31, "active") + "active must be >= 1, got 0",
                  At(lines, 31, "repeat") + "repeat must be >= 0, got -3",
                  At(lines, 31, "skip_first") + "skip_first must be >= 0, got -4"));
  EXPECT_THAT(Validate(Replace(kBase, 30,
                               {R"(evaluation { metrics { key: "accuracy" } })",
                                R"(profiler { output_dir: "prof" wait: 1 warmup: 1 active: 2 })"})),
              IsEmpty());
}

TEST(ConfigValidatorTest, PluginContractsAreCheckedWhereTheValuesAreWritten) {
  const Lines good = Replace(
      kBase, 30,
      {R"(evaluation { metrics { key: "topk_accuracy" kwargs { name: "ks" integers { values: [1, 5] } } } })"});
  EXPECT_THAT(Validate(good), IsEmpty());
  const Lines bad = Replace(kBase, 30,
                            {R"(evaluation { metrics { key: "topk_accuracy")",          // 30
                             R"(  kwargs { name: "ks" integers { values: [1, 0] } })",  // 31
                             R"(  kwargs { name: "weight" number: 0 })",                // 32
                             R"(  kwargs { name: "reduction" str: "man" } } })"});      // 33
  EXPECT_THAT(
      Validate(bad),
      ElementsAre(At(bad, 31, "name") +
                      "kwarg \"ks\" for metric \"topk_accuracy\" must be in [1, inf], got 0",
                  At(bad, 32, "name") +
                      "kwarg \"weight\" for metric \"topk_accuracy\" must be in (0, 1], got 0",
                  At(bad, 33, "name") +
                      "kwarg \"reduction\" for metric \"topk_accuracy\" is \"man\"; "
                      "did you mean \"mean\"?"));
  // Required, and every number finite whatever the specs say.
  const Lines missing = Replace(
      kBase, 30,
      {R"(evaluation { metrics { key: "topk_accuracy" kwargs { name: "weight" number: nan } } })"});
  EXPECT_THAT(
      Validate(missing),
      ElementsAre(
          At(missing, 30, "metrics") + "missing required kwarg \"ks\" for metric \"topk_accuracy\"",
          At(missing, 30, "name") +
              "kwarg \"weight\" for metric \"topk_accuracy\" must be finite, got nan"));
  // The plugin's own check runs once every spec holds, and is reported at its key.
  const Lines unordered = Replace(
      kBase, 30,
      {R"(evaluation { metrics { key: "topk_accuracy" kwargs { name: "ks" integers { values: [5, 1] } } } })"});
  EXPECT_THAT(Validate(unordered),
              ElementsAre(At(unordered, 30, "key") +
                          "metric \"topk_accuracy\": ks must increase, got 5 then 1"));
}

TEST(ConfigValidatorTest, DeprecatedAndCurrentProcessNamesTogether) {
  const Lines lines = Insert(kBase, 14,
                             {R"(  pre_forward_proc { key: "default_pre_forward_process" })",
                              R"(  pre_forward_process { key: "default_pre_forward_process" })"});
  EXPECT_THAT(Validate(lines), ElementsAre(At(lines, 15, "pre_forward_process") +
                                           "give \"pre_forward_proc\" or its deprecated name "
                                           "\"pre_forward_process\", not both"));
}

TEST(ConfigValidatorTest, DeprecatedNamesWorkWithAWarning) {
  const Lines lines = Insert(
      kBase, 14, {R"(  pre_epoch_process { key: "default_pre_epoch_process_with_teacher" })"});
  absl::StatusOr<LoadedConfig> loaded = ParseConfig(absl::StrJoin(lines, "\n"), "t.pbtxt");
  ASSERT_THAT(loaded, IsOk());
  const std::vector<ConfigProblem> problems = ValidateConfig(*loaded);
  EXPECT_FALSE(HasErrors(problems));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].ToString(), At(lines, 14, "pre_epoch_process") +
                                        "warning: \"pre_epoch_process\" is deprecated; call it "
                                        "\"pre_epoch_proc\"");
}

// Validation on test data (a test split, or the dataset the test loader reads) is a warning:
// the run's choices (best checkpoint, early stopping) would be made on the test data.
TEST(ConfigValidatorTest, ValidatingOnTestDataIsAWarning) {
  const Lines split = Replace(
      kBase, 3,
      {R"(datasets { id: "val" key: "fashion_mnist" kwargs { name: "split" str: "test" } })"});
  absl::StatusOr<LoadedConfig> loaded = ParseConfig(absl::StrJoin(split, "\n"), "t.pbtxt");
  ASSERT_THAT(loaded, IsOk());
  std::vector<ConfigProblem> problems = ValidateConfig(*loaded);
  EXPECT_FALSE(HasErrors(problems));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].ToString(),
            At(split, 9, "dataset_id") +
                "warning: validation reads \"val\", a test split: the best checkpoint (and early "
                "stopping) is then chosen on the test data; validate on data held out of the "
                "training split (a dataset's subset)");
  const Lines shared =
      Insert(kBase, 31, {R"(test_data_loader { dataset_id: "val" batch_size: 8 })"});
  loaded = ParseConfig(absl::StrJoin(shared, "\n"), "t.pbtxt");
  ASSERT_THAT(loaded, IsOk());
  problems = ValidateConfig(*loaded);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0].ToString(),
              HasSubstr("validation reads \"val\", the dataset test_data_loader reads too"));
}

TEST(ConfigValidatorTest, ProcessFunctionKeysAndKwargsAreChecked) {
  const Lines lines = Insert(
      kBase, 14,
      {R"(  post_epoch_process { key: "default_post_epoch" })",
       R"(  post_forward_proc { key: "default_post_forward_process" kwargs { name: "x" integer: 1 } })"});
  const Lines forward = Replace(
      lines, 11,
      {R"(  student { forward_proc { key: "forward_batch_only" kwargs { name: "scale" number: 2 } })",
       R"(    forward_hooks { module_path: "layer2" requires_output: true } })"});
  EXPECT_THAT(
      Validate(forward),
      ElementsAre(At(forward, 11, "name") +
                      "unknown kwarg \"scale\" for forward_proc \"forward_batch_only\"; there are "
                      "none",
                  At(forward, 15, "post_epoch_process") +
                      "warning: \"post_epoch_process\" is deprecated; call it \"post_epoch_proc\"",
                  At(forward, 15, "key") +
                      "no post_epoch_proc \"default_post_epoch\" is registered; registered: "
                      "default_post_epoch_process_with_teacher, "
                      "default_post_epoch_process_without_teacher",
                  At(forward, 16, "name") +
                      "unknown kwarg \"x\" for post_forward_proc \"default_post_forward_process\"; "
                      "there are none"));
}

TEST(ConfigValidatorTest, TrainAndStagesExcludeEachOther) {
  Lines both = kBase;
  both.push_back(
      R"(stages { num_epochs: 1 criterion { terms { key: "MSELoss" inputs { arg: "a" source: STUDENT } } } })");
  EXPECT_THAT(Validate(both),
              ElementsAre(At(both, 31, "stages") + "give \"train\" or \"stages\", not both"));
  const Lines neither(kBase.begin(), kBase.begin() + 5);
  EXPECT_THAT(Validate(neither),
              ElementsAre("t.pbtxt:1:1: missing required field \"train\" or \"stages\" in "
                          "DistillConfig"));
}

TEST(ConfigValidatorTest, MultiStageRunsInheritLoadersAndOptimizers) {
  Lines lines(kBase.begin(), kBase.begin() + 5);
  lines.push_back(R"(stages {)");         // 6
  lines.push_back(R"(  num_epochs: 1)");  // 7
  lines.push_back(
      R"(  criterion { terms { key: "MSELoss" inputs { arg: "a" source: STUDENT } } })");
  lines.push_back(R"(})");                // 9
  lines.push_back(R"(stages {)");         // 10
  lines.push_back(R"(  num_epochs: 1)");  // 11
  lines.push_back(
      R"(  criterion { terms { key: "MSELoss" inputs { arg: "a" source: STUDENT } } })");
  lines.push_back(R"(})");
  // The first stage needs a loader and an optimizer; the second keeps the first's.
  EXPECT_THAT(Validate(lines),
              ElementsAre(At(lines, 6, "stages") +
                              "missing required field \"train_data_loader\" in StageConfig "
                              "(required in the first stage)",
                          At(lines, 6, "stages") +
                              "missing required field \"optimizer\" in StageConfig (required in "
                              "the first stage)"));
  lines = Insert(lines, 8,
                 {R"(  train_data_loader { dataset_id: "train" batch_size: 8 })",
                  R"(  optimizer { key: "SGD" })"});
  EXPECT_THAT(Validate(lines), IsEmpty());
}

TEST(ConfigValidatorTest, DuplicateIdsAndNames) {
  Lines lines = Replace(kBase, 3, {R"(datasets { id: "train" key: "fashion_mnist" })"});
  lines = Replace(lines, 16, {R"(      name: "hint")"});
  lines = Replace(lines, 30,
                  {R"(evaluation { metrics { key: "accuracy" } metrics { key: "accuracy" } })"});
  EXPECT_THAT(
      Validate(lines),
      ElementsAre(At(lines, 3, "id") + "duplicate dataset id \"train\" (first at 2:12)",
                  At(lines, 9, "dataset_id") + "unknown dataset id \"val\"; valid: train",
                  At(lines, 24, "name") +
                      "duplicate term name \"hint\" (first at 16:7); give the terms distinct names",
                  At(lines, 30, "key", 2) +
                      "duplicate metric name \"accuracy\"; give the metrics distinct names"));
}

// The best checkpoint follows lower_is_better: perplexity kept as if higher were better (or
// accuracy as if lower were) would keep the worst epoch's student.
TEST(ConfigValidatorTest, APrimaryMetricsDirectionIsItsOwn) {
  const Lines perplexity = Replace(
      kBase, 30, {R"(evaluation { metrics { key: "perplexity" } primary_metric: "perplexity" })"});
  // (This test's binary registers no "perplexity": that problem comes too, and is not ours.)
  EXPECT_THAT(Validate(perplexity),
              ::testing::Contains(HasSubstr("the primary metric \"perplexity\" (perplexity) is "
                                            "lower-is-better: set lower_is_better: true")));
  const Lines right =
      Replace(kBase, 30,
              {R"(evaluation { metrics { key: "perplexity" } metrics { key: "accuracy" } )",
               R"(  primary_metric: "perplexity" lower_is_better: true })"});
  EXPECT_THAT(Validate(right), ::testing::Each(::testing::Not(HasSubstr("lower_is_better"))));
  const Lines accuracy =
      Replace(kBase, 30, {R"(evaluation { metrics { key: "accuracy" } lower_is_better: true })"});
  EXPECT_THAT(Validate(accuracy),
              ElementsAre(HasSubstr("(accuracy) is higher-is-better: set lower_is_better: false")));
}

TEST(ConfigValidatorTest, EvaluationAndCheckpointNeedEachOther) {
  Lines lines = Replace(kBase, 9, {});  // no val loader
  lines = Replace(lines, 29,
                  {R"(evaluation { metrics { key: "accuracy" } primary_metric: "acc" })",
                   R"(checkpoint { save_best: true every_n_epochs: -1 })"});
  EXPECT_THAT(
      Validate(lines),
      ElementsAre(
          At(lines, 29, "evaluation") +
              "evaluation needs a val_data_loader (or a test_data_loader), and no stage has one",
          At(lines, 29, "primary_metric") +
              "unknown metric \"acc\" in primary_metric; valid: accuracy",
          At(lines, 30, "every_n_epochs") + "every_n_epochs must be >= 0, got -1"));
  const Lines no_evaluation = Replace(kBase, 30, {R"(checkpoint { save_best: true })"});
  EXPECT_THAT(Validate(no_evaluation),
              ElementsAre(At(no_evaluation, 30, "save_best") +
                          "save_best needs evaluation (DistillConfig.evaluation is unset)"));
  // A test set is evaluated with the evaluation's metrics, and its loader is checked as any.
  const Lines test =
      Replace(kBase, 30, {R"(test_data_loader { dataset_id: "tset" batch_size: 8 })"});
  EXPECT_THAT(Validate(test),
              ElementsAre(HasSubstr("a test_data_loader needs the evaluation's metrics"),
                          HasSubstr("unknown dataset id \"tset\"")));
}

TEST(ConfigValidatorTest, MissingFilesOnlyWhenAsked) {
  EXPECT_THAT(Validate(kBase), IsEmpty());
  ValidateOptions options;
  options.check_files = true;
  EXPECT_THAT(Validate(kBase, options),
              ElementsAre(At(kBase, 4, "torchscript") + "cannot read torchscript \"teacher.pt\""));
}

TEST(ConfigValidatorTest, SummaryDescribesTheRun) {
  absl::StatusOr<LoadedConfig> loaded = ParseConfig(absl::StrJoin(kBase, "\n"), "t.pbtxt");
  ASSERT_THAT(loaded, IsOk());
  EXPECT_EQ(SummarizeConfig(loaded->config),
            "Distills the teacher (TorchScript teacher.pt) into the student (native model "
            "\"fashion_cnn\") in 1 stage of 2 epochs in all. Stage \"stage0\": 2 epochs on "
            "\"train\" (fashion_mnist, batch 32, shuffled), loss 1 * kd (KDLoss) + 1 * hint "
            "(MSELoss), optimizer SGD, scheduler MultiStepLR per epoch. Evaluates accuracy on the "
            "validation data after every epoch. Run \"t\" writes to runs/t on cpu, seed 0.");
  const Lines optimized =
      Replace(kBase, 4, {R"(teacher { torchscript: "teacher.pt" optimize_for_inference: true })"});
  loaded = ParseConfig(absl::StrJoin(optimized, "\n"), "t.pbtxt");
  ASSERT_THAT(loaded, IsOk());
  EXPECT_THAT(SummarizeConfig(loaded->config),
              HasSubstr("Distills the teacher (TorchScript teacher.pt optimized for inference) "
                        "into the student"));
}

// A dataset wrapper is a plugin of its own kind: its key checked where it is written.
TEST(ConfigValidatorTest, DatasetWrappersAreRegistryKeys) {
  const Lines lines = Replace(kBase, 2,
                              {R"(datasets { id: "train" key: "fashion_mnist")",
                               R"(           wrapper { key: "SSKDDataset" } })"});
  EXPECT_THAT(Validate(lines),
              ElementsAre("t.pbtxt:3:22: no dataset_wrapper \"SSKDDataset\" is registered; "
                          "registered: SSKDDatasetWrapper"));
}

TEST(ConfigValidatorTest, EveryConfigPluginKindIsCheckedHere) {
  // This test links a registry of every kind, so nothing goes unchecked.
  EXPECT_THAT(UncheckedPluginKinds(), IsEmpty());
}

// An output into a dataset's folder: refused directly in it or onto one of its files; a run
// folder below it (data in the working directory, runs/ beside it) is the user's choice.
TEST(ConfigValidatorTest, OutputsIntoADatasetsFolder) {
  const std::string data = std::string(std::getenv("TEST_TMPDIR")) + "/data_root";
  std::filesystem::create_directories(data + "/runs");
  std::ofstream(data + "/train.bin") << "x";
  auto with = [&](const std::string& dst) {
    Lines lines = Replace(kBase, 2,
                          {absl::StrCat(R"(datasets { id: "train" key: "fashion_mnist" kwargs { )",
                                        R"(name: "root" str: ")", data, R"(" } })")});
    return Replace(
        lines, 5,
        {absl::StrCat(R"(student { native { key: "fashion_cnn" } dst_ckpt: ")", dst, R"(" })")});
  };
  const std::string message =
      "\" is inside datasets[0] (\"train\") root's folder: the run would write into the data it "
      "reads; give student.dst_ckpt a file elsewhere";
  EXPECT_THAT(Validate(with(data + "/student.pt")),
              ElementsAre(HasSubstr(absl::StrCat(data, "/student.pt", message))));
  EXPECT_THAT(Validate(with(data + "/train.bin")),
              ElementsAre(HasSubstr(absl::StrCat(data, "/train.bin", message))));
  EXPECT_THAT(Validate(with(data + "/runs/student.pt")), IsEmpty());
}

}  // namespace
}  // namespace kd
