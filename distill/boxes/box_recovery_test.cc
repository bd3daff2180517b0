// What a box leaves when a run stops: a resumed run equals an uninterrupted one; a killed
// checkpoint write leaves the previous checkpoint; a NaN loss stops the run naming the step;
// missing dataset files are named.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/torch_file.h"
#include "distill/boxes/box.h"
#include "distill/boxes/testing/box_test_fixture.h"
#include "distill/procs/proc_func.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

namespace fs = std::filesystem;
using test::BoxTest;
using test::ExpectSameStudent;
using test::kCe;
using test::kData;
using test::kStudent;
using test::Parse;
using test::RunDir;
using test::Stage;
using ::testing::AllOf;
using ::testing::HasSubstr;

TEST_F(BoxTest, ResumeEqualsAnUninterruptedRun) {
  const std::string whole = RunDir("whole"), parts = RunDir("parts");
  const DistillConfig config =
      Parse(absl::StrCat(kData, kStudent, "train {", Stage("s", 3, kCe), "}"));
  ASSERT_THAT((*MakeBox(config, {.run_dir = whole}))->Run(), IsOk());
  DistillConfig stopped = config;
  stopped.mutable_train()->set_num_epochs(1);  // the run that stopped after its first epoch
  ASSERT_THAT((*MakeBox(stopped, {.run_dir = parts}))->Run(), IsOk());
  auto resumed = (*MakeBox(config, {.run_dir = parts, .resume = true}))->Run();
  ASSERT_THAT(resumed, IsOk());
  EXPECT_EQ(resumed->epochs_run, 2);
  ExpectSameStudent(whole, parts);
}

// A stage's src_ckpt is loaded when the stage starts, not when a run resumes inside it: a run
// from such a stage, stopped and resumed, ends as the uninterrupted run does.
TEST_F(BoxTest, ResumeInsideAStageKeepsItsWeightsOverItsSrcCkpt) {
  const std::string source = RunDir("src_source") + "_student.pt";
  ASSERT_THAT((*MakeBox(Parse(absl::StrCat(kData, kStudent, "train {", Stage("w", 1, kCe),
                                           " student { dst_ckpt: \"", source, "\" } }")),
                        {.run_dir = RunDir("src_source")}))
                  ->Run(),
              IsOk());
  const std::string whole = RunDir("src_whole"), parts = RunDir("src_parts");
  const DistillConfig config = Parse(absl::StrCat(kData, kStudent, "train {", Stage("s", 3, kCe),
                                                  " student { src_ckpt: \"", source, "\" } }"));
  ASSERT_THAT((*MakeBox(config, {.run_dir = whole}))->Run(), IsOk());
  DistillConfig stopped = config;
  stopped.mutable_train()->set_num_epochs(1);
  ASSERT_THAT((*MakeBox(stopped, {.run_dir = parts}))->Run(), IsOk());
  ASSERT_THAT((*MakeBox(config, {.run_dir = parts, .resume = true}))->Run(), IsOk());
  ExpectSameStudent(whole, parts);
}

// A checkpoint is checked against the config before libtorch reads the optimizer's state (which
// asserted, "report a bug to PyTorch", on another optimizer's state).
TEST_F(BoxTest, ResumingIntoAnotherOptimizerIsNamed) {
  const std::string dir = RunDir("other_optimizer");
  const DistillConfig config =
      Parse(absl::StrCat(kData, kStudent, "train {", Stage("s", 2, kCe), "}"));
  DistillConfig stopped = config;
  stopped.mutable_train()->set_num_epochs(1);
  ASSERT_THAT((*MakeBox(stopped, {.run_dir = dir}))->Run(), IsOk());
  DistillConfig adam = config;
  OptimizerConfig& optimizer = *adam.mutable_train()->mutable_optimizer();
  optimizer.set_key("Adam");
  optimizer.clear_kwargs();  // SGD's momentum is not Adam's
  Kwarg& lr = *optimizer.add_kwargs();
  lr.set_name("lr");
  lr.set_number(0.01);
  auto box = MakeBox(adam, {.run_dir = dir, .resume = true});
  ASSERT_THAT(box, IsOk());
  EXPECT_THAT((*box)->Run(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("the checkpoint's state does not fit stage \"s\""),
                             HasSubstr("the checkpoint's optimizer is SGD, the config's Adam: "
                                       "resume with the optimizer it was saved with"))));
}

// Images of another size than the model takes: the step names the dataset and the batch, not
// only libtorch's shape error.
TEST_F(BoxTest, SamplesOfTheWrongSizeNameTheDataset) {
  std::string data = kData;
  for (const char* side : {"height", "width"}) {
    const std::string from = absl::StrCat("name: \"", side, "\" integer: 6");
    const size_t at = data.find(from);
    ASSERT_NE(at, std::string::npos);
    data.replace(at, from.size(), absl::StrCat("name: \"", side, "\" integer: 5"));
  }
  const DistillConfig config =
      Parse(absl::StrCat(data, kStudent, "train {", Stage("s", 1, kCe), "}"));
  auto box = MakeBox(config, {.run_dir = RunDir("five_by_five")});
  ASSERT_THAT(box, IsOk());
  EXPECT_THAT((*box)->Run(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("stage \"s\" epoch 1 step 1, a batch of dataset \"train\" "
                                       "(samples Float[32, 1, 5, 5]): forward_proc "
                                       "\"forward_batch_only\" failed: mat1 and mat2 shapes "
                                       "cannot be multiplied (32x25 and 36x16)"),
                             HasSubstr("(do the dataset's samples have the shape the models "
                                       "take?)"))));
}

// A checkpoint write killed midway (SIGKILL while writing a large file over it) leaves the
// previous checkpoint readable: writes go to a temporary file renamed into place.
TEST_F(BoxTest, KilledCheckpointWriteKeepsThePreviousOne) {
  const std::string dir = RunDir("killed");
  const DistillConfig config =
      Parse(absl::StrCat(kData, kStudent, "train {", Stage("s", 1, kCe), "}"));
  ASSERT_THAT((*MakeBox(config, {.run_dir = dir}))->Run(), IsOk());
  const std::string last = dir + "/ckpt/last.pt";
  const pid_t child = fork();
  if (child == 0) {
    const std::string big(512 << 20, 'x');
    (void)WriteFileAtomically(last, big);
    _exit(0);
  }
  // Kill it once its temporary file has some data but not all.
  const std::string tmp = absl::StrCat(last, ".tmp.", child);
  for (int i = 0; i < 500; ++i) {
    std::error_code error;
    if (fs::file_size(tmp, error) > (1u << 20) && !error) break;
    usleep(10 * 1000);
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  std::error_code error;
  const uintmax_t written = fs::file_size(tmp, error);
  ASSERT_FALSE(error) << "the write finished or never started: " << error.message();
  EXPECT_LT(written, uintmax_t{512} << 20);  // killed midway
  auto read = ReadTorchFile(last);
  ASSERT_THAT(read, IsOk());
  EXPECT_EQ(read->toGenericDict().at("epoch").toInt(), 1);
}

// A pre-forward process that poisons the samples from its 12th call on (epoch 2).
int poison_calls = 0;
absl::Status PoisonLater(TrainingContext&, Batch& batch, const Kwargs&) {
  if (++poison_calls >= 12) batch.samples = batch.samples.toTensor() * NAN;
  return absl::OkStatus();
}
KD_REGISTER_PROC_FUNC(PreForwardProc, "test_poison_later", PoisonLater, {});

TEST_F(BoxTest, NanLossStopsNamingTheStepAndKeepsTheLastCheckpoint) {
  const std::string dir = RunDir("nan");
  const DistillConfig config =
      Parse(absl::StrCat(kData, kStudent, "train {", Stage("s", 3, kCe),
                         "pre_forward_proc { key: \"test_poison_later\" } }"));
  poison_calls = 0;
  auto result = (*MakeBox(config, {.run_dir = dir}))->Run();
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kFailedPrecondition,
                               HasSubstr("stage \"s\" epoch 2 step 4: the loss is nan")));
  auto last = ReadTorchFile(dir + "/ckpt/last.pt");
  ASSERT_THAT(last, IsOk());
  EXPECT_EQ(last->toGenericDict().at("epoch").toInt(), 1);
}

TEST_F(BoxTest, MissingDatasetFilesAreNamed) {
  DistillConfig config = Parse(absl::StrCat(kData, kStudent, "train {", Stage("s", 1, kCe), "}"));
  DatasetConfig* fashion = config.mutable_datasets(0);
  fashion->set_key("fashion_mnist");
  fashion->clear_kwargs();
  Kwarg* root = fashion->add_kwargs();
  root->set_name("root");
  root->set_str("/nonexistent/fashion-mnist");
  EXPECT_THAT(MakeBox(config, {.run_dir = RunDir("missing")}),
              StatusIs(absl::StatusCode::kNotFound, AllOf(HasSubstr("dataset \"train\""),
                                                          HasSubstr("/nonexistent/fashion-mnist"),
                                                          HasSubstr("dataset-fashion-mnist"))));
}

}  // namespace
}  // namespace kd
