// The step API of a box (box.h), torchdistill's loop written out by the caller: the same weights
// as Run, bit for bit, for a TrainingBox, a DistillationBox and a multi-stage box; the I/O
// dicts readable after a Forward; calls out of order refused with the call that was due.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/optim/optimizer.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/torch_file.h"
#include "distill/boxes/box.h"
#include "distill/boxes/optim/optim.h"
#include "distill/boxes/testing/box_test_fixture.h"
#include "distill/data/data_loader.h"
#include "distill/losses/criterion.h"
#include "distill/procs/proc_func.h"
#include "distill/procs/training_context.h"
#include "hooks/io_dict.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using test::BoxTest;
using test::ExpectHandLoopEqualsRun;
using test::FitNetConfig;
using test::HandLoop;
using test::kCe;
using test::kData;
using test::kKd;
using test::kStudent;
using test::kTeacher;
using test::Parse;
using test::RunDir;
using test::Stage;
using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST_F(BoxTest, AHandLoopTrainsAsRunDoes) {
  ExpectHandLoopEqualsRun(absl::StrCat(kData, kStudent, "train {", Stage("s", 2, kCe), "}"),
                          "training");
  ExpectHandLoopEqualsRun(
      absl::StrCat(kData, kTeacher, kStudent, "train {", Stage("kd", 2, kKd), "}"), "kd");
  ExpectHandLoopEqualsRun(absl::StrCat(kData, kTeacher, kStudent, "stages {", Stage("warm", 1, kCe),
                                       "} stages {", Stage("kd", 2, kKd), "}"),
                          "multi");
}

TEST_F(BoxTest, TheIoDictsOfTheLastForwardAreReadable) {
  auto box =
      MakeBox(Parse(absl::StrCat(kData, kTeacher, kStudent, "train {", Stage("kd", 1, kKd), "}")),
              {.run_dir = RunDir("io")});
  ASSERT_THAT(box, IsOk());
  EXPECT_THAT((*box)->StudentIoDict(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no Forward")));
  ASSERT_THAT((*box)->PreEpoch(0), IsOk());
  auto loader = (*box)->TrainLoader();
  ASSERT_THAT(loader, IsOk());
  BatchStream batches(**loader);
  Batch batch = batches.Next();
  auto loss = (*box)->Forward(batch);
  ASSERT_THAT(loss, IsOk());
  auto student_io = (*box)->StudentIoDict();
  ASSERT_THAT(student_io, IsOk());
  // kKd hooks the student's output (path ""); it is the logits the loss read.
  auto logits = GetIo(**student_io, "", kOutput);
  ASSERT_THAT(logits, IsOk());
  EXPECT_EQ(logits->toTensor().sizes(), (std::vector<int64_t>{32, 4}));
  EXPECT_THAT(GetIo(**student_io, "fc", kOutput),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("\"\"")));  // the nearest path
  EXPECT_THAT((*box)->TeacherIoDict(), IsOk());
}

// A loop that steps or reads the stage's optimizer, scheduler and criterion itself: a learning
// rate set to 0 through Optimizer() leaves the student as it was after a step.
TEST_F(BoxTest, TheStagesOptimizerSchedulerAndCriterionAreReachable) {
  auto box = MakeBox(Parse(absl::StrCat(kData, kStudent, "train {", Stage("s", 1, kCe), "}")),
                     {.run_dir = RunDir("parts")});
  ASSERT_THAT(box, IsOk());
  auto optimizer = (*box)->Optimizer();
  ASSERT_THAT(optimizer, IsOk());
  ASSERT_EQ((*optimizer)->param_groups().size(), 1u);
  EXPECT_EQ((*optimizer)->param_groups()[0].options().get_lr(), 0.1);  // the fixture's SGD
  auto scheduler = (*box)->Scheduler();
  ASSERT_THAT(scheduler, IsOk());
  EXPECT_NE(*scheduler, nullptr);  // the fixture's MultiStepLR
  auto criterion = (*box)->StageCriterion();
  ASSERT_THAT(criterion, IsOk());
  EXPECT_TRUE((*criterion)->Parameters().empty());  // cross-entropy owns none

  (*optimizer)->param_groups()[0].options().set_lr(0.0);
  std::vector<at::Tensor> before;
  for (const auto& [name, p] : (*box)->student().NamedParameters()) before.push_back(p.clone());
  ASSERT_THAT((*box)->PreEpoch(0), IsOk());
  Batch batch = BatchStream(**(*box)->TrainLoader()).Next();
  ASSERT_THAT((*box)->PreForward(batch), IsOk());
  auto loss = (*box)->Forward(batch);
  ASSERT_THAT(loss, IsOk());
  ASSERT_THAT((*box)->PostForward(*loss), IsOk());
  size_t i = 0;
  for (const auto& [name, p] : (*box)->student().NamedParameters()) {
    EXPECT_TRUE(at::equal(p, before[i++])) << name;
  }
}

// A composed schedule from the config: SequentialLR of a LinearLR warm-up and an ExponentialLR,
// stepped by the epoch (the rates torch's SequentialLR gives: optim_parity_test).
TEST_F(BoxTest, ASequentialScheduleFromTheConfigSetsTheRates) {
  std::string stage = Stage("s", 3, kCe);
  const std::string fixture_scheduler = stage.substr(stage.find("scheduler {"));
  stage = absl::StrCat(stage.substr(0, stage.find("scheduler {")), R"pb(
                         scheduler {
                           key: "SequentialLR"
                           kwargs {
                             name: "milestones"
                             integers { values: [ 2 ] }
                           }
                           schedulers {
                             key: "LinearLR"
                             kwargs { name: "start_factor" number: 0.25 }
                             kwargs { name: "total_iters" integer: 2 }
                           }
                           schedulers {
                             key: "ExponentialLR"
                             kwargs { name: "gamma" number: 0.5 }
                           }
                         })pb",
                       fixture_scheduler.substr(fixture_scheduler.find("criterion")));
  auto box = MakeBox(Parse(absl::StrCat(kData, kStudent, "train {", stage, "}")),
                     {.run_dir = RunDir("sequential")});
  ASSERT_THAT(box, IsOk());
  auto optimizer = (*box)->Optimizer();
  ASSERT_THAT(optimizer, IsOk());
  auto scheduler = (*box)->Scheduler();
  ASSERT_THAT(scheduler, IsOk());
  std::vector<double> rates = {(*optimizer)->param_groups()[0].options().get_lr()};
  for (int epoch = 0; epoch < 3; ++epoch) {
    (*scheduler)->Step({});
    rates.push_back((*optimizer)->param_groups()[0].options().get_lr());
  }
  EXPECT_THAT(rates, ElementsAre(DoubleNear(0.025, 1e-12), DoubleNear(0.0625, 1e-12),
                                 DoubleNear(0.1, 1e-12), DoubleNear(0.05, 1e-12)));
}

// torchdistill's clean_modules: hooks and I/O dicts gone, every parameter trainable; the next
// epoch builds the stage anew and freezes the teacher again.
TEST_F(BoxTest, CleanModulesUnfreezesAndTheNextEpochRebuilds) {
  auto box =
      MakeBox(Parse(absl::StrCat(kData, kTeacher, kStudent, "train {", Stage("kd", 2, kKd), "}")),
              {.run_dir = RunDir("clean")});
  ASSERT_THAT(box, IsOk());
  Box& b = **box;
  auto teacher_trains = [&] {
    bool all = true;
    for (const auto& [name, p] : b.teacher()->NamedParameters()) all = all && p.requires_grad();
    return all;
  };
  ASSERT_THAT(b.PreEpoch(0), IsOk());
  EXPECT_FALSE(teacher_trains());  // the stage freezes the teacher
  Batch batch = BatchStream(**b.TrainLoader()).Next();
  auto loss = b.Forward(batch);
  ASSERT_THAT(loss, IsOk());
  ASSERT_THAT(b.PostForward(*loss), IsOk());
  EXPECT_THAT(b.CleanModules(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                         HasSubstr("CleanModules out of order")));
  ASSERT_THAT(b.PostEpoch({}), IsOk());
  ASSERT_THAT(b.CleanModules(), IsOk());
  EXPECT_TRUE(teacher_trains());
  EXPECT_THAT(b.StudentIoDict(), StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_THAT(b.PreEpoch(1), IsOk());
  EXPECT_FALSE(teacher_trains());
  batch = BatchStream(**b.TrainLoader()).Next();
  ASSERT_THAT(b.Forward(batch), IsOk());
  EXPECT_THAT(b.StudentIoDict(), IsOk());
}

// Per-stage checkpoints (torchdistill's stage src_ckpt and save_stage_ckpt): a stage's dst_ckpt
// holds its student at the stage's end (the stage checkpoint's), and a stage's src_ckpt is
// loaded when it starts.
TEST_F(BoxTest, StagesReadAndWriteTheirModelCheckpoints) {
  const std::string dir = RunDir("stage_ckpts");
  const std::string hint = dir + "_warm_student.pt";
  auto run = MakeBox(Parse(absl::StrCat(kData, kTeacher, kStudent, "stages {",
                                        Stage("warm", 1, kCe), " student { dst_ckpt: \"", hint,
                                        "\" } } stages {", Stage("kd", 1, kKd), "}")),
                     {.run_dir = dir});
  ASSERT_THAT(run, IsOk());
  ASSERT_THAT((*run)->Run(), IsOk());
  auto warm = ReadTorchFile(dir + "/ckpt/warm.pt");
  ASSERT_THAT(warm, IsOk());
  const c10::impl::GenericDict at_warm_end = warm->toGenericDict().at("student").toGenericDict();

  // A box whose only stage starts from that file: its student is the warm stage's at the start;
  // SaveStageCheckpoint writes it to the stage's own dst_ckpt.
  const std::string saved = dir + "_saved_student.pt";
  auto box = MakeBox(
      Parse(absl::StrCat(kData, kStudent, "train {", Stage("kd", 1, kCe), " student { src_ckpt: \"",
                         hint, "\" dst_ckpt: \"", saved, "\" } }")),
      {.run_dir = RunDir("stage_src")});
  ASSERT_THAT(box, IsOk());
  ASSERT_THAT((*box)->PreEpoch(0), IsOk());
  ASSERT_THAT((*box)->SaveStageCheckpoint(), IsOk());
  auto written = ReadTorchFile(saved);
  ASSERT_THAT(written, IsOk());
  int compared = 0;
  for (const auto& [name, tensor] : (*box)->student().NamedParameters()) {
    EXPECT_TRUE(at::equal(tensor, at_warm_end.at(name).toTensor())) << name;
    EXPECT_TRUE(at::equal(tensor, written->toGenericDict().at(name).toTensor())) << name;
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

// A post-forward process of the test's own, recording the kwargs it is called with.
Kwargs* last_post_forward_kwargs = new Kwargs;
absl::Status RecordingPostForward(TrainingContext& box, const at::Tensor& loss,
                                  std::optional<double>, const Kwargs& kwargs) {
  *last_post_forward_kwargs = kwargs;
  box.Backward(loss);
  box.OptimizerStep();
  box.ZeroGrad();
  return absl::OkStatus();
}
KD_REGISTER_PROC_FUNC(PostForwardProc, "test_recording_post_forward", RecordingPostForward,
                      kAnyKwargs);

// A loop that computes its own loss (torchdistill's scripts may): the teacher's output from
// TeacherOutput, the student's from its own forward, the loss its own; PostForward steps on it,
// and kwargs given at the call reach the process function over the config's.
TEST_F(BoxTest, ALoopsOwnLossStepsWithItsKwargs) {
  const std::string stage = absl::StrCat(Stage("s", 1, kKd),
                                         R"pb(post_forward_proc {
                                                key: "test_recording_post_forward"
                                                kwargs { name: "from_config" integer: 1 }
                                                kwargs { name: "both" integer: 2 }
                                              })pb");
  auto box = MakeBox(Parse(absl::StrCat(kData, kTeacher, kStudent, "train {", stage, "}")),
                     {.run_dir = RunDir("own_loss")});
  ASSERT_THAT(box, IsOk());
  Box& b = **box;
  std::map<std::string, at::Tensor> before;
  for (const auto& [name, t] : b.student().NamedParameters()) before[name] = t.clone();
  ASSERT_THAT(b.PreEpoch(0), IsOk());
  auto loader = b.TrainLoader();
  ASSERT_THAT(loader, IsOk());
  Batch batch = BatchStream(**loader).Next();
  auto teacher = b.TeacherOutput(batch);
  ASSERT_THAT(teacher, IsOk());
  const at::Tensor student = b.student().Forward({batch.samples}).toTensor();
  const at::Tensor loss = (student - teacher->toTensor()).pow(2).mean();
  ASSERT_THAT(
      b.PostForward(loss, {{"both", c10::IValue(int64_t{3})}, {"at_call", c10::IValue(true)}}),
      IsOk());
  EXPECT_EQ(last_post_forward_kwargs->at("from_config").toInt(), 1);
  EXPECT_EQ(last_post_forward_kwargs->at("both").toInt(), 3);  // the call's over the config's
  EXPECT_TRUE(last_post_forward_kwargs->at("at_call").toBool());
  int changed = 0;
  for (const auto& [name, t] : b.student().NamedParameters())
    changed += !at::equal(t, before[name]);
  EXPECT_GT(changed, 0);  // the student stepped on the loop's own loss
}

// What a post-forward process saw of the box (TrainingContext's view), at its last call.
struct ViewSeen {
  const IoDict* teacher_io = nullptr;
  const IoDict* student_io = nullptr;
  size_t teacher_entries = 0, student_entries = 0;
  Criterion* criterion = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;
  LrScheduler* scheduler = nullptr;
  DataLoader* train = nullptr;
  DataLoader* val = nullptr;
  double lr = 0;
  int64_t batch_size = 0;
};
ViewSeen* view_seen = new ViewSeen;
absl::Status ViewingPostForward(TrainingContext& box, const at::Tensor& loss, std::optional<double>,
                                const Kwargs&) {
  ViewSeen& seen = *view_seen;
  seen.teacher_io = box.io_dict(ModelRole::kTeacher);
  seen.student_io = box.io_dict(ModelRole::kStudent);
  seen.teacher_entries = seen.teacher_io != nullptr ? seen.teacher_io->size() : 0;
  seen.student_entries = seen.student_io != nullptr ? seen.student_io->size() : 0;
  seen.criterion = box.stage_criterion();
  seen.optimizer = box.stage_optimizer();
  seen.scheduler = box.lr_scheduler();
  seen.train = box.train_data_loader();
  seen.val = box.val_data_loader();
  seen.lr = seen.optimizer != nullptr ? seen.optimizer->param_groups()[0].options().get_lr() : 0;
  seen.batch_size = seen.train != nullptr ? seen.train->options().batch_size : 0;
  box.Backward(loss);
  box.OptimizerStep();
  box.ZeroGrad();
  return absl::OkStatus();
}
KD_REGISTER_PROC_FUNC(PostForwardProc, "test_viewing_post_forward", ViewingPostForward, {});

// Process functions see what torchdistill's see as `self`: the I/O dicts of the forward they
// follow, the criterion, optimizer, scheduler and loaders: the objects the box's own accessors
// give a caller's loop, in the step API and in Run() alike.
TEST_F(BoxTest, ProcessFunctionsSeeTheBoxAsACallersLoopDoes) {
  const std::string text =
      absl::StrCat(kData, kTeacher, kStudent, "train {", Stage("kd", 1, kKd),
                   R"pb(teacher { forward_hooks { module_path: "" requires_output: true } }
                        post_forward_proc { key: "test_viewing_post_forward" })pb",
                   "}");
  auto box = MakeBox(Parse(text), {.run_dir = RunDir("view_steps")});
  ASSERT_THAT(box, IsOk());
  Box& b = **box;
  ASSERT_THAT(b.PreEpoch(0), IsOk());
  auto loader = b.TrainLoader();
  ASSERT_THAT(loader, IsOk());
  Batch batch = BatchStream(**loader).Next();
  auto loss = b.Forward(batch);
  ASSERT_THAT(loss, IsOk());
  ASSERT_THAT(b.PostForward(*loss), IsOk());
  const ViewSeen seen = *view_seen;
  EXPECT_EQ(seen.teacher_io, *b.TeacherIoDict());
  EXPECT_EQ(seen.student_io, *b.StudentIoDict());
  EXPECT_GT(seen.teacher_entries, 0u);
  EXPECT_GT(seen.student_entries, 0u);
  EXPECT_EQ(seen.criterion, *b.StageCriterion());
  EXPECT_EQ(seen.optimizer, *b.Optimizer());
  EXPECT_EQ(seen.scheduler, *b.Scheduler());
  EXPECT_EQ(seen.train, *loader);
  EXPECT_NE(seen.val, nullptr);

  *view_seen = ViewSeen();
  auto run = MakeBox(Parse(text), {.run_dir = RunDir("view_run")});
  ASSERT_THAT(run, IsOk());
  ASSERT_THAT((*run)->Run(), IsOk());
  const DistillConfig config = Parse(text);
  EXPECT_GT(view_seen->teacher_entries, 0u);
  EXPECT_GT(view_seen->student_entries, 0u);
  EXPECT_NE(view_seen->criterion, nullptr);
  EXPECT_DOUBLE_EQ(view_seen->lr, config.train().optimizer().kwargs(0).number());
  EXPECT_EQ(view_seen->batch_size, config.train().train_data_loader().batch_size());
  EXPECT_NE(view_seen->val, nullptr);
}

TEST_F(BoxTest, CallsOutOfOrderNameTheCallThatWasDue) {
  auto box = MakeBox(Parse(absl::StrCat(kData, kStudent, "train {", Stage("s", 1, kCe), "}")),
                     {.run_dir = RunDir("order")});
  ASSERT_THAT(box, IsOk());
  Box& b = **box;
  auto loader = b.TrainLoader();
  ASSERT_THAT(loader, IsOk());
  Batch batch = BatchStream(**loader).Next();
  EXPECT_THAT(b.Forward(batch),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("Forward out of order: no epoch is open: call PreEpoch(epoch)")));
  EXPECT_THAT(b.PostEpoch({}), StatusIs(absl::StatusCode::kFailedPrecondition,
                                        HasSubstr("call PreEpoch(epoch) first")));
  ASSERT_THAT(b.PreEpoch(0), IsOk());
  EXPECT_THAT(b.PreEpoch(1),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("epoch 1 is still open")));
  auto loss = b.Forward(batch);
  ASSERT_THAT(loss, IsOk());
  EXPECT_THAT(b.Forward(batch), StatusIs(absl::StatusCode::kFailedPrecondition,
                                         HasSubstr("awaits PostForward(loss)")));
  ASSERT_THAT(b.PostForward(*loss), IsOk());
  EXPECT_THAT(b.PostForward(at::ones({2})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "PostForward: the loss must be one value (a scalar tensor), got 2 values"));
  EXPECT_THAT(b.TeacherIoDict(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                          HasSubstr("a TrainingBox has no teacher")));
  EXPECT_THAT(b.AdvanceToNextStage(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("end it with PostEpoch")));
  ASSERT_THAT(b.PostEpoch({}), IsOk());
  EXPECT_THAT(b.PostForward(*loss),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("PostForward out of order: no epoch is open")));
  EXPECT_THAT(b.AdvanceToNextStage(),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("stage \"s\" is the last of 1")));
  EXPECT_THAT(b.Run(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("Run after the step API")));
}

// A loop that counts epochs per stage (the API before stages advanced by themselves) is told
// so at its first PreEpoch of the second stage, not silently given another data order; an
// explicit AdvanceToNextStage moves on early, the new stage covering the run's next epochs.
TEST_F(BoxTest, EpochsCountOverTheWholeRun) {
  auto box = MakeBox(Parse(FitNetConfig(RunDir("epochs_files") + "/hint.pt")),
                     {.run_dir = RunDir("epochs_hand")});
  ASSERT_THAT(box, IsOk());
  Box& b = **box;
  auto one_epoch = [&](int64_t epoch) -> absl::Status {
    KD_RETURN_IF_ERROR(b.PreEpoch(epoch));
    KD_ASSIGN_OR_RETURN(DataLoader * loader, b.TrainLoader());
    for (BatchStream batches(*loader); !batches.done();) {
      Batch batch = batches.Next();
      KD_ASSIGN_OR_RETURN(at::Tensor loss, b.Forward(batch));
      KD_RETURN_IF_ERROR(b.PostForward(loss));
    }
    return b.PostEpoch({});
  };
  EXPECT_EQ(b.num_epochs(), 3);
  EXPECT_THAT(b.PreEpoch(2), StatusIs(absl::StatusCode::kFailedPrecondition,
                                      HasSubstr("epoch 2 is outside stage \"hint\", which covers "
                                                "the run's epochs 0 to 1")));
  ASSERT_THAT(one_epoch(0), IsOk());
  // Moving on after one of the hint stage's two epochs: the kd stage covers epoch 1 now.
  ASSERT_THAT(b.AdvanceToNextStage(), IsOk());
  EXPECT_EQ(b.stage_index(), 1u);
  EXPECT_EQ(b.stage_start_epoch(), 1);
  EXPECT_THAT(b.PreEpoch(0),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("epoch 0 is outside stage \"kd\", which covers the run's epochs "
                                 "1 to 1: epochs count over the whole run (num_epochs() is the "
                                 "run's, 3)")));
  ASSERT_THAT(one_epoch(1), IsOk());
  EXPECT_EQ(b.stage_index(), 1u);  // the last stage: nothing to move on to
}

// The teacher's mode: libkd puts it in eval mode each epoch (TEACHER_EVAL, the default);
// torchdistill's boxes never set it (TEACHER_AS_IS), so a teacher handed in in train mode
// distils in train mode, and neither the cache nor the overlap runs with it.
TEST_F(BoxTest, TheTeachersModeIsLibkdsOrTorchdistills) {
  for (const bool as_is : {false, true}) {
    SCOPED_TRACE(as_is ? "TEACHER_AS_IS" : "TEACHER_EVAL");
    const std::string config =
        absl::StrCat(kData, kTeacher, kStudent, "train {", Stage("s", 1, kKd),
                     as_is ? " teacher_mode: TEACHER_AS_IS" : "", "}");
    auto box = MakeBox(Parse(config), {.run_dir = RunDir(as_is ? "mode_as_is" : "mode_eval")});
    ASSERT_THAT(box, IsOk());
    (*box)->teacher()->SetTraining(true);
    ASSERT_THAT((*box)->PreEpoch(0), IsOk());
    EXPECT_EQ((*box)->teacher()->is_training(), as_is);
    EXPECT_TRUE((*box)->student().is_training());
  }
  const std::string cached =
      absl::StrCat(kData, kTeacher, kStudent, "train {", Stage("s", 1, kKd),
                   " teacher_mode: TEACHER_AS_IS teacher_cache { mode: ON } }");
  EXPECT_THAT(MakeBox(Parse(cached), {.run_dir = RunDir("mode_cache_on")}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("teacher_mode TEACHER_AS_IS: the teacher may run in train mode")));
}

// A hand loop stopped after any epoch (inside a stage, or at a stage's end) and resumed from the
// run folder's last.pt ends with the weights of the loop that was never stopped, bit for bit: the
// checkpoint's stage, optimizer, scheduler and RNG state are restored as Run restores them.
TEST_F(BoxTest, AResumedHandLoopEqualsAnUninterruptedOne) {
  const DistillConfig config =
      Parse(absl::StrCat(kData, kTeacher, kStudent, "stages {", Stage("warm", 1, kCe), "} stages {",
                         Stage("kd", 2, kKd), "}"));
  auto whole = MakeBox(config, {.run_dir = RunDir("resume_whole")});
  ASSERT_THAT(whole, IsOk());
  EXPECT_EQ((*whole)->start_epoch(), 0);
  ASSERT_THAT(HandLoop(**whole), IsOk());
  for (const int64_t stopped_after : {1, 2}) {  // the warm stage's end; inside the kd stage
    SCOPED_TRACE(absl::StrCat("stopped after ", stopped_after, " epochs"));
    const std::string dir = RunDir(absl::StrCat("resume_parts", stopped_after));
    {
      auto first = MakeBox(config, {.run_dir = dir});
      ASSERT_THAT(first, IsOk());
      ASSERT_THAT(HandLoop(**first, stopped_after), IsOk());
    }  // the process that stopped
    auto resumed = MakeBox(config, {.run_dir = dir, .resume = true});
    ASSERT_THAT(resumed, IsOk());
    Box& box = **resumed;
    EXPECT_EQ(box.start_epoch(), stopped_after);
    EXPECT_EQ(box.stage_index(), 1u);
    EXPECT_EQ(box.stage_start_epoch(), 1);
    EXPECT_THAT(box.PreEpoch(0),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr(absl::StrCat("epoch 0 was done before the checkpoint ", dir,
                                                "/ckpt/last.pt this box resumes: the loop starts "
                                                "at start_epoch(), ",
                                                stopped_after))));
    ASSERT_THAT(HandLoop(box), IsOk());
    const std::vector<NamedTensor> expected = (*whole)->student().NamedParameters();
    const std::vector<NamedTensor> got = box.student().NamedParameters();
    ASSERT_EQ(got.size(), expected.size());
    ASSERT_FALSE(got.empty());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].first, expected[i].first);
      EXPECT_TRUE(at::equal(got[i].second, expected[i].second)) << got[i].first;
    }
  }
}

// torchdistill's get_teacher_output and target_*_pairs: the teacher alone through its hooks.
TEST_F(BoxTest, TeacherOutputRunsTheTeacherThroughItsHooks) {
  auto box = MakeBox(Parse(FitNetConfig(RunDir("teacher_output_files") + "/h.pt")),
                     {.run_dir = RunDir("teacher_output")});
  ASSERT_THAT(box, IsOk());
  EXPECT_THAT((*box)->TeacherHookedPaths(), IsOkAndHolds(ElementsAre("layer1")));
  EXPECT_THAT((*box)->StudentHookedPaths(), IsOkAndHolds(ElementsAre("layer1")));
  ASSERT_THAT((*box)->PreEpoch(0), IsOk());
  auto loader = (*box)->TrainLoader();
  ASSERT_THAT(loader, IsOk());
  BatchStream batches(**loader);
  Batch batch = batches.Next();
  ASSERT_THAT((*box)->PreForward(batch), IsOk());
  EXPECT_THAT((*box)->TeacherIoDict(), StatusIs(absl::StatusCode::kFailedPrecondition));
  auto output = (*box)->TeacherOutput(batch);
  ASSERT_THAT(output, IsOk());
  // The hint stage's teacher is its stem and layer1: their outputs, computed here on their own.
  auto stem = (*box)->teacher()->Submodel("stem");
  auto layer1 = (*box)->teacher()->Submodel("layer1");
  ASSERT_THAT(stem, IsOk());
  ASSERT_THAT(layer1, IsOk());
  at::Tensor expected;
  {
    at::NoGradGuard no_grad;
    expected = (*layer1)->Forward({(*stem)->Forward({batch.samples})}).toTensor();
  }
  EXPECT_TRUE(at::equal(output->toTensor(), expected));
  EXPECT_FALSE(output->toTensor().requires_grad());
  auto io = (*box)->TeacherIoDict();
  ASSERT_THAT(io, IsOk());
  EXPECT_TRUE(at::equal((*io)->at("layer1").at("output").toTensor(), expected));
  // The step API goes on as before.
  auto loss = (*box)->Forward(batch);
  ASSERT_THAT(loss, IsOk());
  EXPECT_THAT((*box)->TeacherOutput(batch),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("PostForward")));
  ASSERT_THAT((*box)->PostForward(*loss), IsOk());

  auto no_teacher =
      MakeBox(Parse(absl::StrCat(kData, kStudent, "train {", Stage("s", 1, kCe), "}")),
              {.run_dir = RunDir("teacher_output_none")});
  ASSERT_THAT(no_teacher, IsOk());
  EXPECT_THAT((*no_teacher)->TeacherOutput(batch),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no teacher")));
  EXPECT_THAT((*no_teacher)->TeacherHookedPaths(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no teacher")));
}

}  // namespace
}  // namespace kd
