// The teacher cache and the teacher's overlap in a box (StageConfig.teacher_cache,
// overlap_teacher, teacher_cache.lookahead_rows): runs with them equal runs without them, bit
// for bit, on Fashion-MNIST images with random flips and padded crops and a hooked teacher
// feature; over its memory cap it spills and stays exact; a resumed run equals an
// uninterrupted one; what cannot be exact is refused (mode ON) or left off (AUTO), saying why.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "distill/boxes/box.h"
#include "distill/boxes/testing/box_test_fixture.h"
#include "distill/procs/proc_func.h"
#include "hooks/model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using test::BoxTest;
using test::ExpectSameStudent;
using test::Parse;
using test::RunDir;
using ::testing::HasSubstr;

// A teacher forward that takes its time before it reads the batch, and says when it is done;
// a student forward that fails at once.
std::atomic<int> slow_teacher_calls_done{0};
absl::StatusOr<c10::IValue> SlowForward(Model& model, const Batch& batch, const Kwargs&) {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  absl::StatusOr<c10::IValue> output = model.Forward({batch.samples});
  ++slow_teacher_calls_done;
  return output;
}
absl::StatusOr<c10::IValue> FailingForward(Model&, const Batch&, const Kwargs&) {
  return absl::InvalidArgumentError("the student's forward failed on purpose");
}
KD_REGISTER_PROC_FUNC(ForwardProc, "test_slow_forward", SlowForward, {});
KD_REGISTER_PROC_FUNC(ForwardProc, "test_failing_forward", FailingForward, {});

// 64 Fashion-MNIST images (tests/testdata/amp_data), crops padded by 1 and flips: 18 ways
// each image can be drawn. A fashion_cnn teacher (width 4, its own seeded weights) and student
// (width 4); KD on the logits plus MSE between their layer1 outputs (a hooked teacher feature).
std::string Config(int epochs, const std::string& cache) {
  return absl::StrCat(R"pb(
    run { name: "cache" seed: 5 }
    datasets {
      id: "train"
      key: "fashion_mnist"
      kwargs { name: "root" str: ")pb",
                      test::FixturePath("amp_data"), R"pb(" }
      kwargs { name: "random_crop_padding" integer: 1 }
      kwargs { name: "horizontal_flip" boolean: true }
    }
    teacher {
      native {
        key: "fashion_cnn"
        kwargs { name: "width" integer: 4 }
      }
    }
    student {
      native {
        key: "fashion_cnn"
        kwargs { name: "width" integer: 4 }
      }
    }
    train {
      num_epochs: )pb",
                      epochs, R"pb(
      train_data_loader { dataset_id: "train" batch_size: 8 shuffle: true }
      optimizer {
        key: "SGD"
        kwargs { name: "lr" number: 0.05 }
        kwargs { name: "momentum" number: 0.9 }
      }
      teacher { forward_hooks { module_path: "layer1" requires_output: true } }
      student { forward_hooks { module_path: "layer1" requires_output: true } }
      criterion {
        terms {
          key: "KDLoss"
          kwargs { name: "temperature" number: 2 }
          kwargs { name: "alpha" number: 0.5 }
          inputs { arg: "student" source: STUDENT }
          inputs { arg: "teacher" source: TEACHER }
          inputs { arg: "targets" source: TARGETS }
        }
        terms {
          key: "MSELoss"
          weight: 0.1
          inputs { arg: "input" source: STUDENT path: "layer1" }
          inputs { arg: "target" source: TEACHER path: "layer1" }
        }
      }
      )pb",
                      cache, R"pb(
    })pb");
}

// Runs `config` in a fresh folder `name`: the epochs' teacher-cache reports.
std::vector<TeacherCacheReport> RunIn(const DistillConfig& config, const std::string& dir,
                                      bool resume = false) {
  std::vector<TeacherCacheReport> reports;
  auto box = MakeBox(config, {.run_dir = dir,
                              .resume = resume,
                              .on_epoch = [&](const EpochReport& r) {
                                EXPECT_TRUE(r.teacher_cache.has_value());
                                if (r.teacher_cache) reports.push_back(*r.teacher_cache);
                              }});
  EXPECT_THAT(box, IsOk());
  if (box.ok()) {
    EXPECT_THAT((*box)->Run(), IsOk());
  }
  return reports;
}

TEST_F(BoxTest, TeacherCacheGivesTheWeightsOfTheRunWithout) {
  const std::string off = RunDir("off"), on = RunDir("on"), spill = RunDir("spill"),
                    overlap = RunDir("overlap");
  // The sequential run: no cache, the teacher on the training thread.
  const std::vector<TeacherCacheReport> without =
      RunIn(Parse(Config(8, "teacher_cache { mode: OFF } overlap_teacher: OFF")), off);
  ASSERT_EQ(without.size(), 8u);
  EXPECT_FALSE(without[0].on);
  EXPECT_FALSE(without[0].overlapped);
  EXPECT_EQ(without[0].hits, 0);

  // The teacher a batch ahead on a thread of its own, no cache.
  const std::vector<TeacherCacheReport> ahead =
      RunIn(Parse(Config(8, "teacher_cache { mode: OFF } overlap_teacher: ON")), overlap);
  ASSERT_EQ(ahead.size(), 8u);
  EXPECT_TRUE(ahead[0].overlapped);
  ExpectSameStudent(off, overlap);

  // AUTO (the default) for both: on, as everything here is exact (one intra-op thread here), the
  // overlap where a core is idle.
  const std::vector<TeacherCacheReport> with = RunIn(Parse(Config(8, "")), on);
  ASSERT_EQ(with.size(), 8u);
  int64_t hits = 0, misses = 0;
  for (const TeacherCacheReport& r : with) {
    EXPECT_TRUE(r.on) << r.off_reason;
    EXPECT_EQ(r.overlapped, std::thread::hardware_concurrency() >= 2) << r.overlap_off_reason;
    hits += r.hits;
    misses += r.misses;
  }
  EXPECT_EQ(with[0].hits, 0);   // the first epoch sees every sample anew
  // 64 images x 18 draws over 8 epochs: about 90 repeats, of which the checks recompute up to
  // two per batch of 8 with new samples; every row is either served or run.
  EXPECT_GT(hits, 10);
  EXPECT_EQ(hits + misses, 8 * 64);
  EXPECT_EQ(with.back().bytes_disk, 0);
  ExpectSameStudent(off, on);

  // A cap far below what the cache holds (1 MiB, rows of 3.2 KB): the rest spills to the run
  // folder, and reads back exact.
  const std::vector<TeacherCacheReport> spilled =
      RunIn(Parse(Config(8, "teacher_cache { mode: ON memory_mib: 1 }")), spill);
  ASSERT_EQ(spilled.size(), 8u);
  EXPECT_GT(spilled.back().bytes_disk, 0);
  EXPECT_LE(spilled.back().bytes_memory, 1 << 20);
  ExpectSameStudent(off, spill);
}

TEST_F(BoxTest, TeacherLookAheadGivesTheWeightsOfTheRunWithout) {
  const std::string off = RunDir("off"), ahead = RunDir("ahead"), spill = RunDir("spill");
  RunIn(Parse(Config(8, "teacher_cache { mode: OFF } overlap_teacher: OFF")), off);
  // Without the overlap, the look-ahead's default: the teacher runs on the new samples of up
  // to 128 rows of coming batches at once (here a whole epoch of 64).
  const std::vector<TeacherCacheReport> with =
      RunIn(Parse(Config(8, "overlap_teacher: OFF")), ahead);
  ASSERT_EQ(with.size(), 8u);
  int64_t hits = 0, misses = 0;
  for (const TeacherCacheReport& r : with) {
    EXPECT_TRUE(r.on) << r.off_reason;
    EXPECT_EQ(r.lookahead_rows, 128) << r.lookahead_off_reason;
    hits += r.hits;
    misses += r.misses;
  }
  // Every row served or run, and the first batch (8 rows) run alone once more: the check
  // that the teacher computes a row the same in the look-ahead's batch.
  EXPECT_EQ(hits + misses, 8 * 64 + 8);
  EXPECT_GT(hits, 10);
  ExpectSameStudent(off, ahead);

  // Windows of 3 batches, spilled past a 1 MiB cap: still the same student.
  const std::vector<TeacherCacheReport> spilled = RunIn(
      Parse(Config(8, "teacher_cache { mode: ON memory_mib: 1 lookahead_rows: 24 } "
                      "overlap_teacher: OFF")),
      spill);
  ASSERT_EQ(spilled.size(), 8u);
  EXPECT_EQ(spilled[0].lookahead_rows, 24);
  EXPECT_GT(spilled.back().bytes_disk, 0);
  ExpectSameStudent(off, spill);
}

// A step that fails while the next batch's teacher call is in flight: the box returns the error
// only once that call is done (it reads the next batch and the teacher's hooks, which the
// return frees). Returning at once freed the batch under the call: the crash that kept the
// overlap opt-in for a while (an intrusive_ptr refcount assert in box_steps_test's VID test,
// whose second run fails on purpose); this test crashed without the wait.
TEST_F(BoxTest, AFailedStepWaitsForTheTeacherCallInFlight) {
  std::string text = Config(1, "teacher_cache { mode: OFF } overlap_teacher: ON");
  for (const auto& [model, key] : {std::pair{std::string("teacher"), "test_slow_forward"},
                                   std::pair{std::string("student"), "test_failing_forward"}}) {
    const std::string from = model + " { forward_hooks";
    text.replace(text.find(from), from.size(),
                 absl::StrCat(model, " { forward_proc { key: \"", key, "\" } forward_hooks"));
  }
  auto box = MakeBox(Parse(text), {.run_dir = RunDir("failed_step")});
  ASSERT_THAT(box, IsOk());
  slow_teacher_calls_done = 0;
  EXPECT_THAT((*box)->Run(), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("the student's forward failed on purpose")));
  // The first batch's call, awaited before the step, and the second's, launched before the
  // step failed: both finished before Run returned.
  EXPECT_EQ(slow_teacher_calls_done.load(), 2);
}

TEST_F(BoxTest, ResumedRunWithTheCacheEqualsAnUninterruptedOne) {
  const std::string whole = RunDir("whole"), parts = RunDir("parts");
  const DistillConfig config = Parse(Config(4, ""));
  RunIn(config, whole);
  DistillConfig stopped = config;
  stopped.mutable_train()->set_num_epochs(2);
  RunIn(stopped, parts);
  const std::vector<TeacherCacheReport> resumed = RunIn(config, parts, /*resume=*/true);
  ASSERT_EQ(resumed.size(), 2u);
  EXPECT_EQ(resumed[0].hits, 0);  // the cache starts empty after a resume
  ExpectSameStudent(whole, parts);
}

TEST_F(BoxTest, TeacherCacheSaysWhyItIsOff) {
  // A teacher that trains: ON is refused at validation; AUTO leaves the cache off, saying why.
  DistillConfig config = Parse(Config(1, "teacher_cache { mode: ON }"));
  config.mutable_train()->mutable_teacher()->set_requires_grad(true);
  EXPECT_THAT(MakeBox(config, {.run_dir = RunDir("trains")}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the teacher trains in this stage")));
  DistillConfig overlap_trains = config;
  overlap_trains.mutable_train()->clear_teacher_cache();
  overlap_trains.mutable_train()->set_overlap_teacher(ON);
  EXPECT_THAT(MakeBox(overlap_trains, {.run_dir = RunDir("overlap_trains")}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("train.overlap_teacher: overlap_teacher ON, but the overlap "
                                 "would not give the sequential run: the teacher trains")));
  config.mutable_train()->clear_teacher_cache();
  const std::vector<TeacherCacheReport> reports = RunIn(config, RunDir("trains_auto"));
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_FALSE(reports[0].on);
  EXPECT_THAT(reports[0].off_reason, HasSubstr("the teacher trains"));
  EXPECT_FALSE(reports[0].overlapped);
  EXPECT_THAT(reports[0].overlap_off_reason, HasSubstr("the teacher trains"));

  // A wrapped dataset, whose samples are not known from an index and transform: refused when
  // the box is made, by the validator MakeBox runs (config_validator_stage_test too).
  DistillConfig wrapped = Parse(Config(1, "teacher_cache { mode: ON }"));
  wrapped.mutable_datasets(0)->mutable_wrapper()->set_key("SSKDDatasetWrapper");
  EXPECT_THAT(MakeBox(wrapped, {.run_dir = RunDir("wrapped")}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("train.teacher_cache.mode: teacher_cache mode ON, but the cache "
                                 "cannot be exact: the training dataset \"train\" is wrapped "
                                 "(SSKDDatasetWrapper)")));
}

}  // namespace
}  // namespace kd
