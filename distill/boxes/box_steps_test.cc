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
#include "absl/strings/str_replace.h"
#include "base/status_macros.h"
#include "base/torch_file.h"
#include "distill/boxes/box.h"
#include "distill/boxes/internal/box_test_fixture.h"
#include "distill/boxes/optim/optim.h"
#include "distill/data/data_loader.h"
#include "distill/data/dataset.h"
#include "distill/losses/criterion.h"
#include "distill/models/model_registry.h"
#include "distill/procs/proc_func.h"
#include "distill/procs/training_context.h"
#include "hooks/io_dict.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using test::BoxTest;
using test::ExpectAuxModuleIsFile;
using test::kCe;
using test::kData;
using test::kKd;
using test::kStudent;
using test::kTeacher;
using test::LastStudentTensor;
using test::Parse;
using test::RunDir;
using test::Stage;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// torchdistill's image-classification loop over `box`, line for line (examples/torchvision/
// image_classification.py's train(): `for epoch in range(start, box.num_epochs)`), validation
// each epoch: PostEpoch moves on to the next stage after a stage's last epoch.
// `end`: the epoch the loop stops before (a run that was stopped), -1: the run's end.
absl::Status HandLoop(Box& box, int64_t end = -1) {
  if (end < 0) end = box.num_epochs();
  for (int64_t epoch = box.start_epoch(); epoch < end; ++epoch) {
    KD_RETURN_IF_ERROR(box.PreEpoch(epoch));
    KD_ASSIGN_OR_RETURN(DataLoader * loader, box.TrainLoader());
    for (BatchStream batches(*loader); !batches.done();) {
      Batch batch = batches.Next();
      KD_RETURN_IF_ERROR(box.PreForward(batch));
      KD_ASSIGN_OR_RETURN(at::Tensor loss, box.Forward(batch));
      KD_RETURN_IF_ERROR(box.PostForward(loss));
    }
    KD_ASSIGN_OR_RETURN(auto metrics, box.Evaluate());
    KD_RETURN_IF_ERROR(box.PostEpoch(metrics));
  }
  return absl::OkStatus();
}

// Run's last checkpoint and the hand-driven box's student agree bit for bit.
void ExpectHandLoopEqualsRun(const std::string& text, const std::string& name) {
  const DistillConfig config = Parse(text);
  const std::string run_dir = RunDir(name + "_run");
  auto run = MakeBox(config, {.run_dir = run_dir});
  ASSERT_THAT(run, IsOk());
  ASSERT_THAT((*run)->Run(), IsOk());
  auto hand = MakeBox(config, {.run_dir = RunDir(name + "_hand")});
  ASSERT_THAT(hand, IsOk());
  ASSERT_THAT(HandLoop(**hand), IsOk());
  int compared = 0;
  for (const auto& [param, tensor] : (*hand)->student().NamedParameters()) {
    EXPECT_TRUE(at::equal(tensor, LastStudentTensor(run_dir, param))) << name << ": " << param;
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

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
  const std::string stage = absl::StrCat(
      Stage("s", 1, kKd),
      R"pb( post_forward_proc { key: "test_recording_post_forward"
                                kwargs { name: "from_config" integer: 1 }
                                kwargs { name: "both" integer: 2 } })pb");
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
  ASSERT_THAT(b.PostForward(loss, {{"both", c10::IValue(int64_t{3})}, {"at_call", c10::IValue(true)}}),
              IsOk());
  EXPECT_EQ(last_post_forward_kwargs->at("from_config").toInt(), 1);
  EXPECT_EQ(last_post_forward_kwargs->at("both").toInt(), 3);  // the call's over the config's
  EXPECT_TRUE(last_post_forward_kwargs->at("at_call").toBool());
  int changed = 0;
  for (const auto& [name, t] : b.student().NamedParameters()) changed += !at::equal(t, before[name]);
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
absl::Status ViewingPostForward(TrainingContext& box, const at::Tensor& loss,
                                std::optional<double>, const Kwargs&) {
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
  const std::string text = absl::StrCat(
      kData, kTeacher, kStudent, "train {", Stage("kd", 1, kKd),
      R"pb( teacher { forward_hooks { module_path: "" requires_output: true } }
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

// A dataset class of the caller's own, not registered: one tensor and one label per sample, as
// a caller's own storage might hold them.
class SampleListDataset final : public Dataset {
 public:
  SampleListDataset(std::vector<at::Tensor> samples, std::vector<int64_t> labels, int64_t classes)
      : samples_(std::move(samples)), labels_(std::move(labels)), classes_(classes) {}
  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  int64_t num_classes() const override { return classes_; }

 protected:
  Samples GetSamples(const at::Tensor& indices, at::Generator&) const override {
    std::vector<at::Tensor> picked;
    std::vector<int64_t> labels;
    for (int64_t i : std::vector<int64_t>(indices.data_ptr<int64_t>(),
                                          indices.data_ptr<int64_t>() + indices.numel())) {
      picked.push_back(samples_[i]);
      labels.push_back(labels_[i]);
    }
    return {at::stack(picked), at::tensor(labels, at::kLong)};
  }

 private:
  std::vector<at::Tensor> samples_;
  std::vector<int64_t> labels_;
  int64_t classes_;
};

// kData's datasets as the caller's own class: every sample, read once through the registry's.
std::shared_ptr<Dataset> OwnCopy(const DistillConfig& config, const std::string& id) {
  for (const DatasetConfig& d : config.datasets()) {
    if (d.id() != id) continue;
    auto made = MakeDataset(d.key(), {{"num_samples", d.kwargs(0).integer()},
                                      {"num_classes", 4},
                                      {"height", 6},
                                      {"width", 6},
                                      {"seed", 1}});
    EXPECT_THAT(made, IsOk());
    const Batch all = (*made)->Get(at::arange((*made)->size(), at::kLong), uint64_t{0});
    std::vector<at::Tensor> samples;
    std::vector<int64_t> labels;
    for (int64_t i = 0; i < (*made)->size(); ++i) {
      samples.push_back(all.samples.toTensor()[i].clone());
      labels.push_back(all.targets.toTensor()[i].item<int64_t>());
    }
    return std::make_shared<SampleListDataset>(std::move(samples), std::move(labels), 4);
  }
  ADD_FAILURE() << "no dataset " << id;
  return nullptr;
}

// torchdistill's get_distillation_box(teacher_model, student_model, dataset_dict, ...): the
// caller's models and datasets, the config's stages; the weights are those of the box that built
// the same objects from the config.
TEST_F(BoxTest, ABoxOverTheCallersObjectsTrainsAsTheConfigsBox) {
  const DistillConfig full =
      Parse(absl::StrCat(kData, kTeacher, kStudent, "train {", Stage("kd", 2, kKd), "}"));
  const std::string config_dir = RunDir("from_config");
  ASSERT_THAT((*MakeBox(full, {.run_dir = config_dir}))->Run(), IsOk());

  // The same objects, built by the caller in the order the box builds them (seed, teacher,
  // student), the config without its models and datasets.
  DistillConfig bare = full;
  bare.clear_teacher();
  bare.clear_student();
  bare.clear_datasets();
  BoxInputs inputs;
  inputs.datasets = {{"train", OwnCopy(full, "train")}, {"val", OwnCopy(full, "val")}};
  at::manual_seed(full.run().seed());
  auto teacher = MakeRegisteredModel(
      "mlp", {{"in_features", 36}, {"hidden", std::vector<int64_t>{32}}, {"num_classes", 4}});
  auto student = MakeRegisteredModel(
      "mlp", {{"in_features", 36}, {"hidden", std::vector<int64_t>{16}}, {"num_classes", 4}});
  ASSERT_THAT(teacher, IsOk());
  ASSERT_THAT(student, IsOk());
  inputs.teacher = *std::move(teacher);
  inputs.student = *std::move(student);
  auto box = MakeBox(bare, std::move(inputs), {.run_dir = RunDir("from_inputs")});
  ASSERT_THAT(box, IsOk());
  EXPECT_EQ((*box)->kind(), "DistillationBox");
  ASSERT_THAT(HandLoop(**box), IsOk());
  for (const auto& [param, tensor] : (*box)->student().NamedParameters()) {
    EXPECT_TRUE(at::equal(tensor, LastStudentTensor(config_dir, param))) << param;
  }
}

TEST_F(BoxTest, HandedObjectsAndTheConfigMustNotBothGiveOne) {
  const DistillConfig full =
      Parse(absl::StrCat(kData, kStudent, "train {", Stage("s", 1, kCe), "}"));
  BoxInputs twice;
  twice.student = *MakeRegisteredModel("mlp", {{"in_features", 36}, {"num_classes", 4}});
  EXPECT_THAT(MakeBox(full, std::move(twice), {.run_dir = RunDir("twice")}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("student: the config names a model (native) and one was handed")));
  BoxInputs dataset_twice;
  dataset_twice.datasets = {{"train", OwnCopy(full, "train")}};
  EXPECT_THAT(MakeBox(full, std::move(dataset_twice), {.run_dir = RunDir("dataset_twice")}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dataset \"train\" is both in the config and handed")));
  EXPECT_THAT(MakeBox(full, {.run_dir = RunDir("lr0"), .lr_factor = 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lr_factor")));
}

// A dataset of the caller's whose samples do not fit the model: Forward names the stage, the
// step, the dataset and the samples' shape (bad input, not a crash).
TEST_F(BoxTest, ABatchOfTheWrongShapeIsNamed) {
  DistillConfig config = Parse(absl::StrCat(kData, kStudent, "train {", Stage("s", 1, kCe), "}"));
  config.clear_datasets();
  BoxInputs inputs;
  std::vector<at::Tensor> samples(64, at::zeros({1, 5, 5}));  // the mlp takes 6x6
  inputs.datasets = {
      {"train", std::make_shared<SampleListDataset>(samples, std::vector<int64_t>(64, 0), 4)},
      {"val", std::make_shared<SampleListDataset>(samples, std::vector<int64_t>(64, 0), 4)}};
  auto box = MakeBox(config, std::move(inputs), {.run_dir = RunDir("wrong_shape")});
  ASSERT_THAT(box, IsOk());
  ASSERT_THAT((*box)->PreEpoch(0), IsOk());
  Batch batch = BatchStream(**(*box)->TrainLoader()).Next();
  EXPECT_THAT(
      (*box)->Forward(batch),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("stage \"s\" epoch 1 step 1, a batch of dataset \"train\""),
                     HasSubstr("samples Float[32, 1, 5, 5]"),
                     HasSubstr("do the dataset's samples have the shape the models take?"))));
}

// lr_factor multiplies the config's learning rates: lr 0.1 with factor 0.5 trains as lr 0.05.
TEST_F(BoxTest, LrFactorScalesTheConfigsLearningRates) {
  const std::string text = absl::StrCat(kData, kStudent, "train {", Stage("s", 1, kCe), "}");
  DistillConfig half = Parse(text);
  for (auto& kwarg : *half.mutable_train()->mutable_optimizer()->mutable_kwargs()) {
    if (kwarg.name() == "lr") kwarg.set_number(kwarg.number() / 2);
  }
  const std::string scaled = RunDir("lr_scaled"), halved = RunDir("lr_halved");
  ASSERT_THAT((*MakeBox(Parse(text), {.run_dir = scaled, .lr_factor = 0.5}))->Run(), IsOk());
  ASSERT_THAT((*MakeBox(half, {.run_dir = halved}))->Run(), IsOk());
  test::ExpectSameStudent(scaled, halved);
  const std::string plain = RunDir("lr_plain");
  ASSERT_THAT((*MakeBox(Parse(text), {.run_dir = plain}))->Run(), IsOk());
  EXPECT_FALSE(
      at::equal(LastStudentTensor(plain, "fc.weight"), LastStudentTensor(scaled, "fc.weight")));
}


// torchdistill's FitNets: a hint stage on the teacher and the student trimmed to their first
// layers (`sequential`), a connector regressing the student's hint onto the teacher's (L2), then KD
// on the whole models. fashion_cnn on 28x28 images: stem, layer1, layer2, head.
constexpr char kImages[] = R"pb(
  run { name: "t" seed: 3 log_every_n_steps: 4 }
  datasets {
    id: "train"
    key: "synthetic"
    kwargs { name: "num_samples" integer: 96 }
    kwargs { name: "num_classes" integer: 4 }
    kwargs { name: "seed" integer: 1 }
  }
  datasets {
    id: "val"
    key: "synthetic"
    kwargs { name: "num_samples" integer: 64 }
    kwargs { name: "num_classes" integer: 4 }
    kwargs { name: "seed" integer: 1 }
  }
  teacher {
    native {
      key: "fashion_cnn"
      kwargs { name: "width" integer: 8 }
      kwargs { name: "num_classes" integer: 4 }
    }
  }
  student {
    native {
      key: "fashion_cnn"
      kwargs { name: "width" integer: 4 }
      kwargs { name: "num_classes" integer: 4 }
    }
  }
  evaluation { metrics { key: "accuracy" } }
)pb";

std::string HintStage(const std::string& student_dst) {
  constexpr char kHint[] = R"pb(
    teacher {
      sequential: [ "stem", "layer1" ]
      forward_hooks { module_path: "layer1" requires_output: true }
    }
    student {
      sequential: [ "stem", "layer1" ]
      forward_hooks { module_path: "layer1" requires_output: true }
      auxiliary_modules {
        name: "regressor"
        key: "conv_connector"
        kwargs { name: "in_channels" integer: 4 }
        kwargs { name: "out_channels" integer: 8 }
        input { source: STUDENT path: "layer1" }
      }
      dst_ckpt: "$DST"
    }
    criterion {
      terms {
        key: "MSELoss"
        inputs { arg: "input" source: STUDENT path: "regressor" }
        inputs { arg: "target" source: TEACHER path: "layer1" }
      }
    }
  )pb";
  return absl::StrReplaceAll(kHint, {{"$DST", student_dst}});
}

std::string FitNetConfig(const std::string& student_dst) {
  return absl::StrCat(kImages, "stages {", Stage("hint", 2, HintStage(student_dst)), "} stages {",
                      Stage("kd", 1, kKd), "}");
}

TEST_F(BoxTest, AHintStageTrainsTheTrimmedModelsOnly) {
  const std::string hint = RunDir("fitnet_files") + "/hint_student.pt";
  auto box = MakeBox(Parse(FitNetConfig(hint)), {.run_dir = RunDir("fitnet_hand")});
  ASSERT_THAT(box, IsOk());
  std::map<std::string, at::Tensor> before;
  for (const auto& [name, t] : (*box)->student().NamedParameters()) before[name] = t.clone();
  std::map<std::string, at::Tensor> buffers_before;
  for (const auto& [name, t] : (*box)->student().NamedBuffers()) buffers_before[name] = t.clone();
  // The hint stage's epochs alone (its last PostEpoch moves the box on to the next stage).
  const int64_t hint_epochs = (*box)->stage_num_epochs();
  ASSERT_EQ(hint_epochs, 2);
  for (int64_t epoch = 0; epoch < hint_epochs; ++epoch) {
    ASSERT_THAT((*box)->PreEpoch(epoch), IsOk());
    auto loader = (*box)->TrainLoader();
    ASSERT_THAT(loader, IsOk());
    for (BatchStream batches(**loader); !batches.done();) {
      Batch batch = batches.Next();
      ASSERT_THAT((*box)->PreForward(batch), IsOk());
      auto loss = (*box)->Forward(batch);
      ASSERT_THAT(loss, IsOk());
      // The I/O dicts hold the chains' paths.
      auto student_io = (*box)->StudentIoDict();
      ASSERT_THAT(student_io, IsOk());
      EXPECT_EQ((*student_io)->at("layer1").at("output").toTensor().size(1), 4);
      ASSERT_THAT((*box)->PostForward(*loss), IsOk());
    }
    ASSERT_THAT((*box)->PostEpoch({}), IsOk());
  }
  // The student's stem and layer1 trained; its layer2 and head, outside the chain, did not.
  for (const auto& [name, t] : (*box)->student().NamedParameters()) {
    const bool in_chain = name.rfind("stem.", 0) == 0 || name.rfind("layer1.", 0) == 0;
    EXPECT_EQ(at::equal(t, before[name]), !in_chain) << name;
  }
  // The student (in training mode) ran only up to layer1: only those batch norms saw batches.
  for (const auto& [name, t] : (*box)->student().NamedBuffers()) {
    const bool in_chain = name.rfind("stem.", 0) == 0 || name.rfind("layer1.", 0) == 0;
    EXPECT_EQ(at::equal(t, buffers_before[name]), !in_chain) << name;
  }
  // The hint stage's last PostEpoch moved the box on to the next stage, as torchdistill's
  // multi-stage box does, writing the stage's dst_ckpt: the chain's state dict, torchdistill's
  // keys, the student's values.
  EXPECT_EQ((*box)->stage_index(), 1u);
  EXPECT_EQ((*box)->stage_start_epoch(), 2);
  EXPECT_EQ((*box)->num_epochs(), 3);  // the run's: 2 + 1
  auto written = ReadTorchFile(hint);
  ASSERT_THAT(written, IsOk());
  const c10::impl::GenericDict saved = written->toGenericDict();
  EXPECT_TRUE(saved.contains("stem.0.weight"));
  EXPECT_TRUE(saved.contains("layer1.1.running_mean"));
  EXPECT_FALSE(saved.contains("head.2.weight"));
  for (const auto& [name, t] : (*box)->student().NamedParameters()) {
    if (saved.contains(name)) {
      EXPECT_TRUE(at::equal(t, saved.at(name).toTensor())) << name;
    }
  }
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
      Parse(absl::StrCat(kData, kTeacher, kStudent, "stages {", Stage("warm", 1, kCe),
                         "} stages {", Stage("kd", 2, kKd), "}"));
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

// A config built in code goes through the loader's validator in MakeBox: a mistyped kwarg, an
// unknown key or a loss reading what no hook records is refused before anything is built, named
// by its field path; handed-in models and datasets count as the config's.
TEST_F(BoxTest, MakeBoxValidatesAConfigBuiltInCode) {
  DistillConfig config =
      Parse(absl::StrCat(kData, kTeacher, kStudent, "train {", Stage("kd", 1, kKd), "}"));
  Kwarg& typo = *config.mutable_train()->mutable_optimizer()->add_kwargs();
  typo.set_name("momentun");
  typo.set_number(0.5);
  config.mutable_train()->mutable_scheduler()->set_key("StepLRR");
  EXPECT_THAT(MakeBox(config, {.run_dir = RunDir("typo")}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("the config handed to MakeBox is not valid (2 problems):"),
                             HasSubstr("\n  train.optimizer.kwargs[2].name: unknown kwarg "
                                       "\"momentun\" for optimizer \"SGD\"; did you mean "
                                       "\"momentum\"?"),
                             HasSubstr("\n  train.scheduler.key: no scheduler \"StepLRR\" is "
                                       "registered; did you mean \"StepLR\"?"))));
  // A student neither in the config nor handed in (ABoxOverTheCallersObjectsTrainsAsTheConfigsBox
  // shows handed-in objects accepted).
  DistillConfig bare = Parse(absl::StrCat(kData, kStudent, "train {", Stage("s", 1, kCe), "}"));
  bare.clear_student();
  EXPECT_THAT(MakeBox(bare, {.run_dir = RunDir("no_student")}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("(1 problem):\n  missing required field \"student\" in "
                                 "DistillConfig")));
}

// A checkpoint of torchdistill's own save_ckpt ({'model': OrderedDict, 'optimizer', 'best_value',
// 'lr_scheduler', 'args'}), made from the Python twin of libkd's fashion_cnn
// (tests/testdata/make_torchdistill_ckpt.py), is a stage's src_ckpt: the stage starts from its
// model state, which is the twin's state saved as a plain dict.
TEST_F(BoxTest, ATorchdistillCheckpointIsASrcCkpt) {
  const std::string stage = absl::StrCat(
      Stage("s", 1, kCe), " student { src_ckpt: \"",
      test::FixturePath("fashion_cnn4.torchdistill_ckpt.pt"), "\" }");
  std::string config = absl::StrCat(kImages, "train {", stage, "}");
  auto box = MakeBox(Parse(config), {.run_dir = RunDir("torchdistill_src")});
  ASSERT_THAT(box, IsOk());
  ASSERT_THAT((*box)->PreEpoch(0), IsOk());  // the stage starts: its src_ckpt loaded
  auto expected = ReadTorchFile(test::FixturePath("fashion_cnn4.torchdistill_expected.pt"));
  ASSERT_THAT(expected, IsOk());
  int compared = 0;
  for (const auto& [name, tensor] : (*box)->student().NamedParameters()) {
    EXPECT_TRUE(at::equal(tensor, expected->toGenericDict().at(name).toTensor())) << name;
    ++compared;
  }
  EXPECT_GT(compared, 4);
}

TEST_F(BoxTest, AFitNetRunAndItsHandLoopAgree) {
  ExpectHandLoopEqualsRun(FitNetConfig(RunDir("fitnet_files2") + "/hint.pt"), "fitnet");
}

TEST_F(BoxTest, PathsOfASequentialStageAreTheChains) {
  // A hook outside the chain, and a chain module that does not exist: named with the nearest.
  std::string outside = FitNetConfig(RunDir("fitnet_bad") + "/h.pt");
  outside.replace(outside.find("forward_hooks { module_path: \"layer1\""),
                  std::string("forward_hooks { module_path: \"layer1\"").size(),
                  "forward_hooks { module_path: \"head\"");
  const std::string read = "source: TEACHER path: \"layer1\"";
  outside.replace(outside.find(read), read.size(), "source: TEACHER path: \"head\"");
  EXPECT_THAT(MakeBox(Parse(outside), {.run_dir = RunDir("fitnet_bad_run")}),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("no module \"head\" in this sequential model"),
                             HasSubstr("layer1.0"))));
  std::string unknown = FitNetConfig(RunDir("fitnet_bad2") + "/h.pt");
  unknown.replace(unknown.find("\"stem\", \"layer1\""), std::string("\"stem\", \"layer1\"").size(),
                  "\"stem\", \"layer9\"");
  EXPECT_THAT(MakeBox(Parse(unknown), {.run_dir = RunDir("fitnet_bad2_run")}),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("teacher.sequential"), HasSubstr("no module \"layer9\""),
                             HasSubstr("layer1"))));
}

// torchdistill's device_ids: one device per process.
TEST_F(BoxTest, DeviceIdsNameTheProcesssOneDevice) {
  const DistillConfig config =
      Parse(absl::StrCat(kData, kStudent, "train {", Stage("s", 1, kCe), "}"));
  EXPECT_THAT(MakeBox(config, {.run_dir = RunDir("ids_one"), .device_ids = {"cpu"}}), IsOk());
  EXPECT_THAT(MakeBox(config, {.run_dir = RunDir("ids_two"), .device_ids = {"cuda:0", "cuda:1"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("names 2 devices"), HasSubstr("one process per device"))));
  EXPECT_THAT(
      MakeBox(config, {.run_dir = RunDir("ids_clash"), .device = "cpu", .device_ids = {"cuda:0"}}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("device_ids [\"cuda:0\"] disagrees with BoxOptions.device \"cpu\"")));
  // The one entry is the device: a CUDA device on this CPU machine is refused as run.device is.
  if (!at::hasCUDA()) {
    EXPECT_THAT(MakeBox(config, {.run_dir = RunDir("ids_cuda"), .device_ids = {"cuda:0"}}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("run.device")));
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

// VID (torchdistill's VariationalDistributor4VID + VIDLoss): the student's layer1 through the
// Regressor4VID auxiliary module, whose (mean, variance) pair the loss reads by element; the
// regressor and its variance train with the student.
TEST_F(BoxTest, VidTrainsItsRegressorWithTheStudent) {
  constexpr char kVid[] = R"pb(
    teacher { forward_hooks { module_path: "layer1" requires_output: true } }
    student {
      forward_hooks { module_path: "layer1" requires_output: true }
      auxiliary_modules {
        name: "vid"
        key: "Regressor4VID"
        kwargs { name: "in_channels" integer: 4 }
        kwargs { name: "middle_channels" integer: 8 }
        kwargs { name: "out_channels" integer: 8 }
        kwargs { name: "eps" number: 1e-5 }
        kwargs { name: "init_pred_var" number: 5 }
        input { source: STUDENT path: "layer1" }
      }
    }
    criterion {
      terms {
        key: "CrossEntropyLoss"
        inputs { arg: "input" source: STUDENT }
        inputs { arg: "target" source: TARGETS }
      }
      terms {
        key: "VIDLoss"
        weight: 0.5
        inputs { arg: "pred_mean" source: STUDENT path: "vid" element: 0 }
        inputs { arg: "pred_var" source: STUDENT path: "vid" element: 1 }
        inputs { arg: "teacher" source: TEACHER path: "layer1" }
      }
    }
  )pb";
  const std::string dir = RunDir("vid");
  auto box = MakeBox(Parse(absl::StrCat(kImages, "train {", Stage("vid", 1, kVid), "}")),
                     {.run_dir = dir});
  ASSERT_THAT(box, IsOk());
  ASSERT_THAT((*box)->Run(), IsOk());
  auto last = ReadTorchFile(dir + "/ckpt/last.pt");
  ASSERT_THAT(last, IsOk());
  int found = 0;
  for (const auto& entry : last->toGenericDict().at("auxiliary_modules").toGenericDict()) {
    const std::string& name = entry.key().toStringRef();
    if (name.find("soft_plus_param") == std::string::npos) continue;
    ++found;
    // It started at softplus^-1(5 - eps) in every channel; the optimizer moved it.
    const at::Tensor start = at::full({8}, std::log(std::exp(5.0 - 1e-5) - 1.0));
    EXPECT_FALSE(at::allclose(entry.value().toTensor(), start)) << name;
  }
  EXPECT_EQ(found, 1);

  // Without `element` the pair is not a tensor: the message says how to pick one.
  std::string whole = absl::StrCat(kImages, "train {", Stage("vid", 1, kVid), "}");
  whole.replace(whole.find(" element: 0"), std::string(" element: 0").size(), "");
  auto unpicked = MakeBox(Parse(whole), {.run_dir = RunDir("vid_unpicked")});
  ASSERT_THAT(unpicked, IsOk());
  EXPECT_THAT((*unpicked)->Run(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("student io[\"vid\"][\"output\"] is a Tuple, not a tensor: "
                                 "pick one of its values with `element`")));
}

// A stage's src_ckpt kept in the run folder's checkpoint dir is an input of the run: replacing
// the folder's earlier run (overwrite) keeps it, and the stage starts from it.
TEST_F(BoxTest, OverwriteKeepsTheStageCheckpointsTheRunReads) {
  const std::string dir = RunDir("keeps_src");
  const std::string warm = dir + "/ckpt/warm_student.pt";
  auto first = MakeBox(Parse(absl::StrCat(kData, kStudent, "train {", Stage("warm", 1, kCe),
                                          " student { dst_ckpt: \"", warm, "\" } }")),
                       {.run_dir = dir});
  ASSERT_THAT(first, IsOk());
  ASSERT_THAT((*first)->Run(), IsOk());
  auto saved = ReadTorchFile(warm);
  ASSERT_THAT(saved, IsOk());
  first->reset();  // the first run ends: its box releases the folder

  auto second = MakeBox(Parse(absl::StrCat(kData, kStudent, "train {", Stage("next", 1, kCe),
                                           " student { src_ckpt: \"", warm, "\" } }")),
                        {.run_dir = dir, .overwrite = true});
  ASSERT_THAT(second, IsOk());
  ASSERT_THAT((*second)->PreEpoch(0), IsOk());  // the stage starts: src_ckpt loaded
  int compared = 0;
  for (const auto& [name, tensor] : (*second)->student().NamedParameters()) {
    EXPECT_TRUE(at::equal(tensor, saved->toGenericDict().at(name).toTensor())) << name;
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

// Factor transfer as torchdistill's config has it: the teacher's paraphraser trained alone in a
// stage of its own (reconstructing the teacher's layer1), its weights carried to the next stage
// by its checkpoint file (torchdistill's paraphraser_ckpt), where it is frozen and gives the
// factor that the student's translator learns (FTLoss beside cross-entropy).
TEST_F(BoxTest, FactorTransferCarriesItsParaphraserToTheNextStage) {
  const std::string dir = RunDir("ft");
  const std::string paraphraser_ckpt = RunDir("ft_files") + "/paraphraser.pt";
  const std::string paraphraser = absl::StrCat(R"pb(
      name: "paraphraser"
      key: "Paraphraser4FactorTransfer"
      kwargs { name: "k" number: 0.5 }
      kwargs { name: "num_input_channels" integer: 8 }
      input { source: TEACHER path: "layer1" }
      ckpt: ")pb", paraphraser_ckpt, "\"");
  const std::string stage1 = absl::StrCat(
      R"pb(teacher { forward_hooks { module_path: "layer1" requires_output: true }
                     auxiliary_modules {)pb", paraphraser, R"pb(} }
           student { requires_grad: false }
           criterion { terms { key: "MSELoss"
                               inputs { arg: "input" source: TEACHER path: "paraphraser" }
                               inputs { arg: "target" source: TEACHER path: "layer1" } } })pb");
  const std::string stage2 = absl::StrCat(
      R"pb(teacher { forward_hooks { module_path: "layer1" requires_output: true }
                     auxiliary_modules {)pb", paraphraser,
      R"pb( kwargs { name: "uses_decoder" boolean: false } requires_grad: false } }
           student { forward_hooks { module_path: "layer1" requires_output: true }
                     auxiliary_modules { name: "translator" key: "Translator4FactorTransfer"
                                         kwargs { name: "num_input_channels" integer: 4 }
                                         kwargs { name: "num_output_channels" integer: 4 }
                                         input { source: STUDENT path: "layer1" } } }
           criterion { terms { key: "CrossEntropyLoss" inputs { arg: "input" source: STUDENT }
                               inputs { arg: "target" source: TARGETS } }
                       terms { key: "FTLoss"
                               inputs { arg: "student" source: STUDENT path: "translator" }
                               inputs { arg: "teacher" source: TEACHER path: "paraphraser" } } })pb");
  auto box = MakeBox(Parse(absl::StrCat(kImages, "stages {", Stage("paraphraser", 1, stage1),
                                        "} stages {", Stage("ft", 1, stage2), "}")),
                     {.run_dir = dir});
  ASSERT_THAT(box, IsOk());
  ASSERT_THAT((*box)->Run(), IsOk());
  // The paraphraser's weights at the end of its stage (that stage's checkpoint) are the file's
  // after the second stage: loaded from it there, and frozen.
  // Weights and batch-norm statistics alike: frozen beside a frozen teacher, it ran in eval mode
  // there.
  const int compared = ExpectAuxModuleIsFile(dir + "/ckpt/paraphraser.pt", "teacher.paraphraser.",
                                             paraphraser_ckpt);
  EXPECT_EQ(compared, 24 + 18);  // 12 weights and biases; 6 batch norms' three statistics
}

// Knowledge review (torchdistill's Student4KnowledgeReview + HierarchicalContextLoss): the
// student's stem, layer1 and layer2 maps fused deepest first, each fusion after the first reading
// the previous one's residual (extra_inputs, element 1); each fusion's output (element 0) matched
// to the teacher's map. The loss is the terms' sum on the recorded values, and every parameter the
// optimizer holds (the student's and all three fusions', attention included) gets a gradient.
TEST_F(BoxTest, KnowledgeReviewChainsItsFusions) {
  constexpr char kFusion[] = R"pb(
      auxiliary_modules {
        name: "abf_$PATH" key: "AttentionBasedFusion"
        kwargs { name: "in_channels" integer: $IN }
        kwargs { name: "mid_channels" integer: 8 }
        kwargs { name: "out_channels" integer: $OUT }
        $ATTENTION
        input { path: "$PATH" }
      })pb";
  auto fusion = [&](const std::string& path, int in, int out, const std::string& previous) {
    return absl::StrReplaceAll(
        kFusion, {{"$PATH", path},
                  {"$IN", absl::StrCat(in)},
                  {"$OUT", absl::StrCat(out)},
                  {"$ATTENTION", previous.empty()
                                     ? ""
                                     : absl::StrCat(R"pb(kwargs { name: "uses_attention" boolean: true }
                                                     extra_inputs { path: ")pb",
                                                    previous, R"pb(" element: 1 })pb")}});
  };
  std::string hooks, terms;
  for (const char* path : {"stem", "layer1", "layer2"}) {
    hooks += absl::StrCat("forward_hooks { module_path: \"", path, "\" requires_output: true } ");
    terms += absl::StrCat("terms { name: \"review_", path, "\" key: \"HierarchicalContextLoss\" ",
                          "inputs { arg: \"student\" source: STUDENT path: \"abf_", path,
                          "\" element: 0 } inputs { arg: \"teacher\" source: TEACHER path: \"",
                          path, "\" } } ");
  }
  const std::string stage = absl::StrCat(
      "teacher { ", hooks, "} student { forward_hooks { module_path: \"\" requires_output: true } ",
      hooks, fusion("layer2", 8, 16, ""),
      fusion("layer1", 4, 8, "abf_layer2"), fusion("stem", 4, 8, "abf_layer1"),
      " } criterion { terms { key: \"CrossEntropyLoss\" inputs { arg: \"input\" source: STUDENT } "
      "inputs { arg: \"target\" source: TARGETS } } ",
      terms, "}");
  auto box = MakeBox(Parse(absl::StrCat(kImages, "train {", Stage("kr", 1, stage), "}")),
                     {.run_dir = RunDir("kr")});
  ASSERT_THAT(box, IsOk());
  ASSERT_THAT((*box)->PreEpoch(0), IsOk());
  auto loader = (*box)->TrainLoader();
  ASSERT_THAT(loader, IsOk());
  BatchStream batches(**loader);
  Batch batch = batches.Next();
  ASSERT_THAT((*box)->PreForward(batch), IsOk());
  auto loss = (*box)->Forward(batch);
  ASSERT_THAT(loss, IsOk());

  auto student_io = (*box)->StudentIoDict();
  auto teacher_io = (*box)->TeacherIoDict();
  ASSERT_THAT(student_io, IsOk());
  ASSERT_THAT(teacher_io, IsOk());
  auto review = MakeLoss("HierarchicalContextLoss", {});
  ASSERT_THAT(review, IsOk());
  const at::Tensor logits = (*student_io)->at("").at("output").toTensor();
  at::Tensor expected =
      at::cross_entropy_loss(logits, batch.targets.toTensor(), {}, at::Reduction::Mean);
  for (const char* path : {"stem", "layer1", "layer2"}) {
    const auto fused = (*student_io)->at(absl::StrCat("abf_", path)).at("output").toTupleRef();
    const at::Tensor output = fused.elements()[0].toTensor();
    const at::Tensor teacher = (*teacher_io)->at(path).at("output").toTensor();
    ASSERT_EQ(output.sizes(), teacher.sizes()) << path;
    // The residual is the fusion's mid-width map at the student map's size.
    EXPECT_EQ(fused.elements()[1].toTensor().size(1), 8) << path;
    auto value = (*review)->Forward(LossInputs({{"student", output}, {"teacher", teacher}}));
    ASSERT_THAT(value, IsOk());
    expected = expected + *value;
  }
  EXPECT_TRUE(at::allclose(*loss, expected, 1e-5, 1e-6)) << *loss << " vs " << expected;

  loss->backward();
  auto optimizer = (*box)->Optimizer();
  ASSERT_THAT(optimizer, IsOk());
  int64_t params = 0;
  for (const auto& group : (*optimizer)->param_groups()) {
    for (const at::Tensor& p : group.params()) {
      ++params;
      ASSERT_TRUE(p.grad().defined());
      EXPECT_GT(p.grad().abs().sum().item<double>(), 0) << p.sizes();
    }
  }
  // The student's 14 and the fusions' 6, 8 and 8 (the deepest has no attention convolution).
  EXPECT_EQ(params, 14 + 6 + 8 + 8);
  box->reset();

  // The whole stage runs, and the run's checkpoint keeps the three fusions.
  const std::string dir = RunDir("kr_run");
  auto run = MakeBox(Parse(absl::StrCat(kImages, "train {", Stage("kr", 1, stage), "}")),
                     {.run_dir = dir});
  ASSERT_THAT(run, IsOk());
  ASSERT_THAT((*run)->Run(), IsOk());
  auto last = ReadTorchFile(dir + "/ckpt/last.pt");
  ASSERT_THAT(last, IsOk());
  int attention = 0;
  for (const auto& entry : last->toGenericDict().at("auxiliary_modules").toGenericDict()) {
    if (entry.key().toStringRef().find("attention_conv") != std::string::npos) ++attention;
  }
  EXPECT_EQ(attention, 4);  // abf_layer1's and abf_stem's weight and bias
}

// SSKD as torchdistill's config has it: the training samples in four rotations
// (SSKDDatasetWrapper) run through forward_batch4sskd; a first stage trains the teacher's
// self-supervision module alone (AuxSSKDLoss), kept by its checkpoint file; the second distils
// the student with SSKDLoss, the teacher's module loaded from the file and frozen.
TEST_F(BoxTest, SskdTrainsTheTeachersModuleThenTheStudent) {
  const std::string dir = RunDir("sskd");
  const std::string ss_ckpt = RunDir("sskd_files") + "/teacher_ss.pt";
  std::string images = kImages;
  const std::string train = "id: \"train\"\n    key: \"synthetic\"";
  ASSERT_NE(images.find(train), std::string::npos);
  images.replace(images.find(train), train.size(),
                 train + " wrapper { key: \"SSKDDatasetWrapper\" }");
  const std::string teacher_ss = absl::StrCat(
      R"pb(auxiliary_modules { name: "ss" key: "SSWrapper4SSKD"
                               kwargs { name: "feat_dim" integer: 784 }
                               input { path: "layer2" } ckpt: ")pb",
      ss_ckpt, "\"");
  const std::string stage1 = absl::StrCat(
      R"pb(teacher { forward_proc { key: "forward_batch4sskd" }
                     forward_hooks { module_path: "layer2" requires_output: true } )pb",
      teacher_ss, R"pb( } }
           student { forward_proc { key: "forward_batch4sskd" } requires_grad: false }
           criterion { terms { key: "AuxSSKDLoss" inputs { arg: "ss" source: TEACHER path: "ss" } } })pb");
  const std::string stage2 = absl::StrCat(
      R"pb(teacher { forward_proc { key: "forward_batch4sskd" }
                     forward_hooks { module_path: "layer2" requires_output: true } )pb",
      teacher_ss, R"pb( requires_grad: false } }
           student { forward_proc { key: "forward_batch4sskd" }
                     forward_hooks { module_path: "layer2" requires_output: true }
                     auxiliary_modules { name: "ss" key: "SSWrapper4SSKD"
                                         kwargs { name: "feat_dim" integer: 392 }
                                         input { path: "layer2" } } }
           criterion { terms { key: "SSKDLoss"
                               kwargs { name: "kl_temp" number: 4 }
                               kwargs { name: "ss_temp" number: 0.5 }
                               kwargs { name: "tf_temp" number: 4 }
                               kwargs { name: "ss_ratio" number: 0.75 }
                               kwargs { name: "tf_ratio" number: 1 }
                               kwargs { name: "loss_weights" numbers { values: [ 1, 0.9, 10, 2.7 ] } }
                               inputs { arg: "student_linear" source: STUDENT }
                               inputs { arg: "teacher_linear" source: TEACHER }
                               inputs { arg: "student_ss" source: STUDENT path: "ss" }
                               inputs { arg: "teacher_ss" source: TEACHER path: "ss" }
                               inputs { arg: "targets" source: TARGETS } } })pb");
  auto box = MakeBox(Parse(absl::StrCat(images, "stages {", Stage("ss", 1, stage1), "} stages {",
                                        Stage("sskd", 1, stage2), "}")),
                     {.run_dir = dir});
  ASSERT_THAT(box, IsOk());
  ASSERT_THAT((*box)->PreEpoch(0), IsOk());
  auto loader = (*box)->TrainLoader();
  ASSERT_THAT(loader, IsOk());
  BatchStream batches(**loader);
  Batch batch = batches.Next();
  // 32 samples in four views: the teacher ran on 128 rows.
  ASSERT_EQ(batch.samples.toTensor().sizes(), at::IntArrayRef({32, 4, 1, 28, 28}));
  ASSERT_THAT((*box)->PreForward(batch), IsOk());
  auto loss = (*box)->Forward(batch);
  ASSERT_THAT(loss, IsOk());
  auto teacher_io = (*box)->TeacherIoDict();
  ASSERT_THAT(teacher_io, IsOk());
  EXPECT_EQ((*teacher_io)->at("ss").at("output").toTensor().sizes(), at::IntArrayRef({128, 784}));
  box->reset();

  auto run = MakeBox(Parse(absl::StrCat(images, "stages {", Stage("ss", 1, stage1), "} stages {",
                                        Stage("sskd", 1, stage2), "}")),
                     {.run_dir = dir, .overwrite = true});
  ASSERT_THAT(run, IsOk());
  ASSERT_THAT((*run)->Run(), IsOk());
  // The teacher's module ends the second stage as the first left it in its file: frozen there.
  const int compared = ExpectAuxModuleIsFile(dir + "/ckpt/last.pt", "teacher.ss.", ss_ckpt);
  EXPECT_EQ(compared, 4);  // two linears' weights and biases: "0.*", "2.*"
}

// CRD as torchdistill configures it: the training set in CRDDatasetWrapper (each sample's
// pos_idx and contrast_idx in the batch), both models' maps through Linear4CRD embeddings (the
// teacher's trains beside the frozen teacher), CRDLoss reading pos_idx and contrast_idx from the
// batch (source BATCH). One step updates the memory banks' rows of exactly the batch's samples.
TEST_F(BoxTest, CrdReadsTheBatchsIndicesIntoItsMemoryBanks) {
  constexpr char kCrd[] = R"pb(
    teacher {
      forward_hooks { module_path: "layer2" requires_output: true }
      auxiliary_modules { name: "embed" key: "Linear4CRD"
                          kwargs { name: "in_features" integer: 784 }
                          kwargs { name: "out_features" integer: 16 }
                          input { path: "layer2" } }
    }
    student {
      forward_hooks { module_path: "layer2" requires_output: true }
      auxiliary_modules { name: "embed" key: "Linear4CRD"
                          kwargs { name: "in_features" integer: 392 }
                          kwargs { name: "out_features" integer: 16 }
                          input { path: "layer2" } }
    }
    criterion {
      terms { key: "CrossEntropyLoss" inputs { arg: "input" source: STUDENT }
              inputs { arg: "target" source: TARGETS } }
      terms { name: "crd" key: "CRDLoss" weight: 0.8
              kwargs { name: "input_size" integer: 16 }
              kwargs { name: "output_size" integer: 96 }
              kwargs { name: "num_negative_samples" integer: 8 }
              kwargs { name: "num_samples" integer: 96 }
              inputs { arg: "student" source: STUDENT path: "embed" }
              inputs { arg: "teacher" source: TEACHER path: "embed" }
              inputs { arg: "pos_idx" source: BATCH path: "pos_idx" }
              inputs { arg: "contrast_idx" source: BATCH path: "contrast_idx" } }
    }
  )pb";
  std::string images = kImages;
  const std::string train = "id: \"train\"\n    key: \"synthetic\"";
  ASSERT_NE(images.find(train), std::string::npos);
  images.replace(images.find(train), train.size(),
                 train + R"pb( wrapper { key: "CRDDatasetWrapper"
                                         kwargs { name: "num_negative_samples" integer: 8 } })pb");
  auto box = MakeBox(Parse(absl::StrCat(images, "train {", Stage("crd", 1, kCrd), "}")),
                     {.run_dir = RunDir("crd")});
  ASSERT_THAT(box, IsOk());
  ASSERT_THAT((*box)->PreEpoch(0), IsOk());
  auto criterion = (*box)->StageCriterion();
  ASSERT_THAT(criterion, IsOk());
  auto bank = [&] {
    for (const auto& [name, tensor] : (*criterion)->NamedState()) {
      if (name == "crd/memory_v1") return tensor.clone();
    }
    ADD_FAILURE() << "no crd/memory_v1";
    return at::Tensor();
  };
  const at::Tensor before = bank();
  auto loader = (*box)->TrainLoader();
  ASSERT_THAT(loader, IsOk());
  BatchStream batches(**loader);
  Batch batch = batches.Next();
  ASSERT_THAT((*box)->PreForward(batch), IsOk());
  auto loss = (*box)->Forward(batch);
  ASSERT_THAT(loss, IsOk());
  const at::Tensor changed = ((bank() - before).abs().sum(1) > 0).nonzero().flatten();
  const auto supp = c10::impl::toTypedDict<std::string, at::Tensor>(batch.supp.toGenericDict());
  // torchdistill's "exact" mode: each sample is its own positive.
  EXPECT_TRUE(at::equal(supp.at("pos_idx"), supp.at("indices")));
  EXPECT_EQ(supp.at("contrast_idx").sizes(), at::IntArrayRef({32, 9}));
  EXPECT_TRUE(at::equal(changed, std::get<0>(at::sort(supp.at("pos_idx")))));
  ASSERT_THAT((*box)->PostForward(*loss), IsOk());
}

}  // namespace
}  // namespace kd
