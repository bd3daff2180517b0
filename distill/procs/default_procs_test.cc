#include "distill/procs/default_procs.h"

#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "testing/status_matchers.h"
#include "distill/procs/proc_func.h"
#include "distill/procs/testing/fake_training_context.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kd {
namespace {

using ::kd::test::FakeTrainingContext;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

// The expected logs below follow torchdistill's default processes step by step
// (torchdistill/core/interfaces/{pre,post}_{epoch,forward}_proc.py).

TEST(DefaultProcsTest, PreEpochWithTeacherClearsIoAndSetsModes) {
  FakeTrainingContext box(/*with_teacher=*/true);
  box.teacher.SetTraining(true);
  box.student.SetTraining(false);
  box.distributed_value = true;
  EXPECT_THAT(DefaultPreEpochProcessWithTeacher(box, 4, {}), IsOk());
  EXPECT_THAT(box.log, ElementsAre("ClearIo(teacher)", "ClearIo(student)", "SetSamplerEpoch(4)"));
  EXPECT_FALSE(box.teacher.is_training());
  EXPECT_TRUE(box.student.is_training());

  FakeTrainingContext single(/*with_teacher=*/true);
  EXPECT_THAT(DefaultPreEpochProcessWithTeacher(single, 0, {}), IsOk());
  EXPECT_THAT(single.log, ElementsAre("ClearIo(teacher)", "ClearIo(student)"));
}

TEST(DefaultProcsTest, WithTeacherProcessesRefuseABoxWithoutOne) {
  FakeTrainingContext box(/*with_teacher=*/false);
  EXPECT_THAT(DefaultPreEpochProcessWithTeacher(box, 0, {}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "default_pre_epoch_process_with_teacher needs a teacher, and this box has "
                       "none; use default_pre_epoch_process_without_teacher instead"));
  EXPECT_THAT(DefaultPostEpochProcessWithTeacher(box, std::nullopt, {}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "default_post_epoch_process_with_teacher needs a teacher, and this box "
                       "has none; use default_post_epoch_process_without_teacher instead"));
  EXPECT_THAT(box.log, IsEmpty());
}

TEST(DefaultProcsTest, PreEpochWithoutTeacherTouchesTheStudentOnly) {
  FakeTrainingContext box(/*with_teacher=*/false);
  box.distributed_value = true;
  EXPECT_THAT(DefaultPreEpochProcessWithoutTeacher(box, 2, {}), IsOk());
  EXPECT_THAT(box.log, ElementsAre("ClearIo(student)", "SetSamplerEpoch(2)"));
  EXPECT_TRUE(box.student.is_training());
}

TEST(DefaultProcsTest, PreForwardDoesNothing) {
  FakeTrainingContext box(/*with_teacher=*/true);
  Batch batch{c10::IValue(int64_t{1}), c10::IValue(), c10::IValue()};
  EXPECT_THAT(DefaultPreForwardProcess(box, batch, {}), IsOk());
  EXPECT_THAT(box.log, IsEmpty());
  EXPECT_EQ(batch.samples.toInt(), 1);
}

TEST(DefaultProcsTest, PostForwardStepsEveryBatchByDefault) {
  FakeTrainingContext box(/*with_teacher=*/true);
  EXPECT_THAT(DefaultPostForwardProcess(box, at::full({}, 1.5), std::nullopt, {}), IsOk());
  EXPECT_THAT(box.log, ElementsAre("IncrementStageGradCount -> 1", "Backward(1.5)", "OptimizerStep",
                                   "ZeroGrad"));
}

TEST(DefaultProcsTest, PostForwardAccumulatesClipsAndSchedulesStepwise) {
  FakeTrainingContext box(/*with_teacher=*/true);
  box.grad_accum_step_value = 2;
  box.max_grad_norm_value = 5.0;
  box.has_scheduler_value = true;
  box.scheduling_step_value = 3;
  for (int i = 0; i < 6; ++i) {
    ASSERT_THAT(DefaultPostForwardProcess(box, at::full({}, 1.0), 0.9, {}), IsOk());
  }
  // The loss is halved; the optimizer steps at batches 2, 4, 6; the scheduler only where a
  // multiple of 3 batches meets an optimizer step (batch 6: period 6 / 3 = 2).
  EXPECT_THAT(
      box.log,
      ElementsAre("IncrementStageGradCount -> 1", "Backward(0.5)", "IncrementStageGradCount -> 2",
                  "Backward(0.5)", "ClipGradNorm(5)", "OptimizerStep", "ZeroGrad",
                  "IncrementStageGradCount -> 3", "Backward(0.5)", "IncrementStageGradCount -> 4",
                  "Backward(0.5)", "ClipGradNorm(5)", "OptimizerStep", "ZeroGrad",
                  "IncrementStageGradCount -> 5", "Backward(0.5)", "IncrementStageGradCount -> 6",
                  "Backward(0.5)", "ClipGradNorm(5)", "OptimizerStep", "ZeroGrad",
                  "SchedulerStep(metric=0.9, epoch=2)"));
}

TEST(DefaultProcsTest, PostForwardLeavesEpochwiseSchedulersAlone) {
  FakeTrainingContext box(/*with_teacher=*/false);
  box.has_scheduler_value = true;
  box.scheduling_step_value = 0;
  EXPECT_THAT(DefaultPostForwardProcess(box, at::full({}, 2.0), std::nullopt, {}), IsOk());
  EXPECT_THAT(box.log, ElementsAre("IncrementStageGradCount -> 1", "Backward(2)", "OptimizerStep",
                                   "ZeroGrad"));
}

TEST(DefaultProcsTest, PostEpochWithTeacherStepsEpochwiseSchedulerAndAuxiliaries) {
  FakeTrainingContext box(/*with_teacher=*/true);
  box.has_scheduler_value = true;
  box.distributed_value = true;
  EXPECT_THAT(DefaultPostEpochProcessWithTeacher(box, 0.7, {}), IsOk());
  EXPECT_THAT(box.log,
              ElementsAre("SchedulerStep(metric=0.7, epoch=-)", "AuxiliaryPostEpoch(teacher)",
                          "AuxiliaryPostEpoch(student)", "Barrier"));

  FakeTrainingContext stepwise(/*with_teacher=*/true);
  stepwise.has_scheduler_value = true;
  stepwise.scheduling_step_value = 10;
  EXPECT_THAT(DefaultPostEpochProcessWithTeacher(stepwise, 0.7, {}), IsOk());
  EXPECT_THAT(stepwise.log,
              ElementsAre("AuxiliaryPostEpoch(teacher)", "AuxiliaryPostEpoch(student)"));
}

TEST(DefaultProcsTest, PostEpochWithoutTeacher) {
  FakeTrainingContext box(/*with_teacher=*/false);
  box.has_scheduler_value = true;
  EXPECT_THAT(DefaultPostEpochProcessWithoutTeacher(box, std::nullopt, {}), IsOk());
  EXPECT_THAT(box.log,
              ElementsAre("SchedulerStep(metric=-, epoch=-)", "AuxiliaryPostEpoch(student)"));

  FakeTrainingContext no_scheduler(/*with_teacher=*/false);
  EXPECT_THAT(DefaultPostEpochProcessWithoutTeacher(no_scheduler, 0.5, {}), IsOk());
  EXPECT_THAT(no_scheduler.log, ElementsAre("AuxiliaryPostEpoch(student)"));
}

TEST(DefaultProcsTest, DefaultsAreWhatAnEmptyStageBuilds) {
  FakeTrainingContext box(/*with_teacher=*/false);
  const StageConfig empty;
  auto pre_epoch = BuildStageProcFunc<PreEpochProc>(empty, /*with_teacher=*/false);
  ASSERT_THAT(pre_epoch, IsOk());
  EXPECT_THAT((*pre_epoch)(box, 1), IsOk());
  auto post_forward = BuildStageProcFunc<PostForwardProc>(empty, /*with_teacher=*/false);
  ASSERT_THAT(post_forward, IsOk());
  EXPECT_THAT((*post_forward)(box, at::full({}, 3.0), std::nullopt), IsOk());
  auto post_epoch = BuildStageProcFunc<PostEpochProc>(empty, /*with_teacher=*/false);
  ASSERT_THAT(post_epoch, IsOk());
  EXPECT_THAT((*post_epoch)(box, std::nullopt), IsOk());
  EXPECT_THAT(box.log,
              ElementsAre("ClearIo(student)", "IncrementStageGradCount -> 1", "Backward(3)",
                          "OptimizerStep", "ZeroGrad", "AuxiliaryPostEpoch(student)"));
}

}  // namespace
}  // namespace kd
