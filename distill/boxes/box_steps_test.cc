// The step API of a box (box.h), torchdistill's loop written out by the caller: the same weights
// as Run, bit for bit, for a TrainingBox, a DistillationBox and a multi-stage box; the I/O
// dicts readable after a Forward; calls out of order refused with the call that was due.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "distill/boxes/box.h"
#include "distill/boxes/internal/box_test_fixture.h"
#include "distill/data/data_loader.h"
#include "hooks/io_dict.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using test::BoxTest;
using test::kCe;
using test::kData;
using test::kKd;
using test::kStudent;
using test::kTeacher;
using test::LastStudentTensor;
using test::Parse;
using test::RunDir;
using test::Stage;
using ::testing::HasSubstr;

// torchdistill's image-classification loop over `box`, every stage, with validation each epoch.
absl::Status HandLoop(Box& box) {
  for (size_t s = 0; s < box.num_stages(); ++s) {
    if (s > 0) KD_RETURN_IF_ERROR(box.AdvanceToNextStage());
    for (int64_t epoch = 0; epoch < box.num_epochs(); ++epoch) {
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
  EXPECT_THAT(b.PostForward(*loss), StatusIs(absl::StatusCode::kFailedPrecondition,
                                             HasSubstr("no Forward since the last PostForward")));
  EXPECT_THAT(b.TeacherIoDict(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                          HasSubstr("a TrainingBox has no teacher")));
  EXPECT_THAT(b.AdvanceToNextStage(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("end it with PostEpoch")));
  ASSERT_THAT(b.PostEpoch({}), IsOk());
  EXPECT_THAT(b.AdvanceToNextStage(),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("stage \"s\" is the last of 1")));
  EXPECT_THAT(b.Run(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("Run after the step API")));
}

}  // namespace
}  // namespace kd
