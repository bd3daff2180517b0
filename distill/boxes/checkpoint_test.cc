#include "distill/boxes/checkpoint.h"

#include <cmath>
#include <string>

#include <ATen/ATen.h>

#include "base/torch_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::HasSubstr;

c10::impl::GenericDict Tensors(std::initializer_list<const char*> names) {
  c10::impl::GenericDict d(c10::StringType::get(), c10::TensorType::get());
  for (const char* n : names) d.insert(n, at::ones({2}));
  return d;
}

// A checkpoint as the boxes write it (distill/boxes/box.cc, Checkpoint and StageRun::SaveTo).
c10::impl::GenericDict Valid() {
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  d.insert("format", std::string(kCheckpointFormat));
  d.insert("stage", int64_t{0});
  d.insert("stage_name", std::string("kd"));
  d.insert("epoch", int64_t{3});
  d.insert("best", std::nan(""));
  d.insert("student", Tensors({"fc.weight", "fc.bias"}));
  d.insert("rng", at::zeros({5056}, at::kByte));
  d.insert("optimizer", at::zeros({40}, at::kByte));
  d.insert("scheduler", c10::List<double>({0.1, 2.0}));
  d.insert("grad_count", int64_t{12});
  d.insert("loss_state", Tensors({}));
  d.insert("auxiliary_modules", Tensors({"connector.weight"}));
  return d;
}

TEST(CheckpointTest, AcceptsWhatTheBoxesWrite) {
  EXPECT_THAT(CheckCheckpoint(Valid()), IsOk());
  // Through a file: what the unpickler gives back is accepted too.
  const std::string path = ::testing::TempDir() + "/ckpt.pt";
  ASSERT_THAT(WriteTorchFile(path, Valid()), IsOk());
  absl::StatusOr<c10::impl::GenericDict> read = ReadCheckpoint(path);
  ASSERT_THAT(read, IsOk());
  EXPECT_EQ(read->at("epoch").toInt(), 3);
  // A stage's end: the next stage starts afresh, without the stage's state.
  c10::impl::GenericDict fresh = Valid();
  ASSERT_EQ(fresh.erase("optimizer"), 1u);
  ASSERT_EQ(fresh.erase("loss_state"), 1u);
  fresh.insert("fresh_stage", true);
  EXPECT_THAT(CheckCheckpoint(fresh), IsOk());
}

TEST(CheckpointTest, NamesTheFirstKeyThatIsWrong) {
  auto without = [](const char* key) {
    c10::impl::GenericDict d = Valid();
    EXPECT_EQ(d.erase(key), 1u);
    return CheckCheckpoint(d);
  };
  EXPECT_THAT(without("epoch"),
              StatusIs(absl::StatusCode::kInvalidArgument, "not a libkd checkpoint: no \"epoch\""));
  EXPECT_THAT(without("student"), StatusIs(absl::StatusCode::kInvalidArgument,
                                           "not a libkd checkpoint: no \"student\""));
  EXPECT_THAT(without("rng"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"rng\"")));
  c10::impl::GenericDict d = Valid();
  d.insert_or_assign("stage", int64_t{-1});
  EXPECT_THAT(CheckCheckpoint(d), StatusIs(absl::StatusCode::kInvalidArgument,
                                           "not a libkd checkpoint: \"stage\" is Int < 0, not "
                                           "an int >= 0"));
  d = Valid();
  d.insert_or_assign("epoch", std::string("3"));
  EXPECT_THAT(CheckCheckpoint(d), StatusIs(absl::StatusCode::kInvalidArgument,
                                           "not a libkd checkpoint: \"epoch\" is String, not an "
                                           "int >= 0"));
  d = Valid();
  c10::impl::GenericDict student(c10::StringType::get(), c10::AnyType::get());
  student.insert("fc.weight", int64_t{1});
  d.insert_or_assign("student", student);
  EXPECT_THAT(CheckCheckpoint(d),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "not a libkd checkpoint: \"student\" has an entry String -> Int, not name "
                       "-> tensor"));
  d = Valid();
  d.insert_or_assign("rng", at::zeros({4}, at::kFloat));
  EXPECT_THAT(CheckCheckpoint(d), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("\"rng\" is not a 1-d uint8 CPU tensor")));
  // The CPU generator's state is 5056 bytes (mt19937's 624 words and the rest of
  // CPUGeneratorImplState); another size is damage, named before anything loads it.
  d = Valid();
  d.insert_or_assign("rng", at::zeros({5000}, at::kByte));
  EXPECT_THAT(CheckCheckpoint(d),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "not a libkd checkpoint: its RNG state is 5000 bytes, this libtorch's CPU "
                       "generator's 5056"));
  d = Valid();
  d.insert_or_assign("optimizer_groups", std::string("all"));
  EXPECT_THAT(CheckCheckpoint(d),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"optimizer_groups\" is not a list of integers")));
  d = Valid();
  d.insert_or_assign("format", std::string("libkd-checkpoint-9"));
  EXPECT_THAT(CheckCheckpoint(d),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "not a libkd checkpoint: format \"libkd-checkpoint-9\"; this libkd reads "
                       "\"libkd-checkpoint-1\""));
  EXPECT_THAT(CheckCheckpoint(c10::IValue(at::ones({1}))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "not a libkd checkpoint: it holds a Tensor, not a dict"));
}

TEST(CheckpointTest, ReadNamesTheFile) {
  const std::string path = ::testing::TempDir() + "/tensor.pt";
  ASSERT_THAT(WriteTorchFile(path, c10::IValue(at::ones({1}))), IsOk());
  EXPECT_THAT(ReadCheckpoint(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       path + ": not a libkd checkpoint: it holds a Tensor, not a dict"));
}

}  // namespace
}  // namespace kd
