// A box over the caller's own objects (torchdistill's get_distillation_box with models and
// datasets handed in), a config built in code, torchdistill's checkpoints and device_ids, and
// the run folder's inputs kept.
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
#include "base/torch_file.h"
#include "distill/boxes/box.h"
#include "distill/boxes/testing/box_test_fixture.h"
#include "distill/boxes/optim/optim.h"
#include "distill/data/data_loader.h"
#include "distill/data/dataset.h"
#include "distill/models/model_registry.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using test::BoxTest;
using test::HandLoop;
using test::kCe;
using test::kData;
using test::kImages;
using test::kKd;
using test::kStudent;
using test::kTeacher;
using test::LastStudentTensor;
using test::Parse;
using test::RunDir;
using test::Stage;
using ::testing::AllOf;
using ::testing::HasSubstr;

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

}  // namespace
}  // namespace kd
