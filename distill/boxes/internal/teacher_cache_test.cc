#include "distill/boxes/internal/teacher_cache.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "distill/data/dataset.h"
#include "testing/status_matchers.h"

namespace kd {
namespace boxes_internal {
namespace {

using ::testing::HasSubstr;

#define KD_CONCAT_INNER(a, b) a##b
#define KD_CONCAT(a, b) KD_CONCAT_INNER(a, b)
#define ASSERT_OK(expr) ASSERT_THAT((expr), IsOk())
#define ASSERT_OK_AND_ASSIGN(decl, expr)                          \
  auto KD_CONCAT(status_or_, __LINE__) = (expr);                  \
  ASSERT_THAT(KD_CONCAT(status_or_, __LINE__).status(), IsOk());  \
  decl = *std::move(KD_CONCAT(status_or_, __LINE__))

// A batch of `indices` whose samples are a function of (index, transform): what a dataset with
// reported transforms gives.
Batch MakeBatch(const std::vector<int64_t>& indices, const std::vector<int64_t>& transforms) {
  const at::Tensor index = at::tensor(indices, at::kLong);
  const at::Tensor transform = at::tensor(transforms, at::kLong);
  const at::Tensor base = (index * 10 + transform).to(at::kFloat).unsqueeze(1);
  c10::Dict<std::string, at::Tensor> supp;
  supp.insert("indices", index);
  supp.insert(kTransformKey, transform);
  return Batch{at::sin(base * at::arange(1, 7, at::kFloat) * 0.37), index % 3, supp};
}

// The teacher: output = tanh(x W), io["feat"]["output"] = x * 2 + 1, counting the rows it ran.
struct FakeTeacher {
  at::Tensor weight = at::randn({6, 4}, at::detail::createCPUGenerator(7));
  int64_t rows_run = 0;
  double batch_bias = 0;  // > 0: each row's output depends on the batch's size (inexact)
  bool tuple_io = false;
  bool wide = false;  // io["feat"]["output"] twice as wide: another row shape

  absl::StatusOr<TeacherValues> operator()(const Batch& batch) {
    const at::Tensor x = batch.samples.toTensor();
    rows_run += x.size(0);
    TeacherValues values;
    values.output = at::tanh(x.matmul(weight)) + batch_bias * static_cast<double>(x.size(0));
    if (tuple_io) {
      values.io["feat"]["input"] = c10::ivalue::Tuple::create({x, x});
    } else {
      values.io["feat"]["output"] = wide ? at::cat({x, x}, 1) * 2 + 1 : x * 2 + 1;
    }
    return values;
  }
};

TeacherCache::Forward Calls(FakeTeacher& teacher) {
  return [&teacher](const Batch& batch) { return teacher(batch); };
}

void ExpectSameAsDirect(const TeacherValues& got, const Batch& batch, FakeTeacher teacher) {
  absl::StatusOr<TeacherValues> want = teacher(batch);
  ASSERT_TRUE(want.ok());
  EXPECT_TRUE(at::equal(got.output.toTensor(), want->output.toTensor()));
  EXPECT_TRUE(at::equal(got.io.at("feat").at("output").toTensor(),
                        want->io.at("feat").at("output").toTensor()));
}

TEST(TeacherCacheTest, HitsAreTheBytesOfRecomputing) {
  FakeTeacher teacher;
  TeacherCache cache({.num_transforms = 4, .memory_bytes = 1 << 20, .spill_path = "unused"});
  const Batch first = MakeBatch({0, 1, 2, 3}, {0, 1, 2, 3});
  ASSERT_OK_AND_ASSIGN(TeacherValues a, cache.Run(first, Calls(teacher)));
  ExpectSameAsDirect(a, first, teacher);
  EXPECT_EQ(teacher.rows_run, 4);
  // The same samples, transformed the same, in another order: no forward at all.
  const Batch again = MakeBatch({3, 1, 0, 2}, {3, 1, 0, 2});
  ASSERT_OK_AND_ASSIGN(TeacherValues b, cache.Run(again, Calls(teacher)));
  EXPECT_EQ(teacher.rows_run, 4);
  ExpectSameAsDirect(b, again, teacher);
  const TeacherCacheReport stats = cache.TakeStats();
  EXPECT_EQ(stats.hits, 4);
  EXPECT_EQ(stats.misses, 4);
  EXPECT_EQ(stats.bytes_memory, 4 * (4 + 6) * 4);  // 4 rows of 4 + 6 floats
  EXPECT_EQ(stats.bytes_disk, 0);
  EXPECT_GT(stats.saved_seconds, 0);
  EXPECT_EQ(cache.TakeStats().hits, 0);  // counts restart
}

TEST(TeacherCacheTest, MixedBatchRunsTheMissesAndTwoChecks) {
  FakeTeacher teacher;
  TeacherCache cache({.num_transforms = 4, .memory_bytes = 1 << 20, .spill_path = "unused"});
  ASSERT_OK(cache.Run(MakeBatch({0, 1, 2, 3}, {0, 0, 0, 0}), Calls(teacher)).status());
  // Rows 1 and 3 hit; 0 with another transform and 5 are new.
  const Batch mixed = MakeBatch({0, 1, 5, 3, 2}, {1, 0, 0, 0, 0});
  ASSERT_OK_AND_ASSIGN(TeacherValues got, cache.Run(mixed, Calls(teacher)));
  EXPECT_EQ(teacher.rows_run, 4 + 2 + 2);  // two misses, two hits recomputed as checks
  ExpectSameAsDirect(got, mixed, teacher);
  EXPECT_TRUE(cache.enabled());
  const TeacherCacheReport stats = cache.TakeStats();
  EXPECT_EQ(stats.hits, 1);  // three found, two of them recomputed
  EXPECT_EQ(stats.misses, 4 + 4);
}

TEST(TeacherCacheTest, LookAheadRunsTheNewRowsOfSeveralBatchesOnce) {
  FakeTeacher teacher;
  TeacherCache cache({.num_transforms = 2, .memory_bytes = 1 << 20, .spill_path = "unused"});
  // Sample 0 comes twice, transformed the same: run once.
  const Batch b0 = MakeBatch({0, 1}, {0, 0}), b1 = MakeBatch({2, 3, 4}, {1, 1, 0}),
              b2 = MakeBatch({5, 0}, {0, 0});
  EXPECT_TRUE(cache.HasMisses(b0));
  ASSERT_OK(cache.Prefill({&b0, &b1, &b2}, Calls(teacher)));
  // The first batch alone (the first look-ahead's check), then the six new rows together.
  EXPECT_EQ(teacher.rows_run, 2 + 6);
  for (const Batch* batch : {&b0, &b1, &b2}) {
    EXPECT_FALSE(cache.HasMisses(*batch));
    ASSERT_OK_AND_ASSIGN(TeacherValues got, cache.Run(*batch, Calls(teacher)));
    ExpectSameAsDirect(got, *batch, teacher);
  }
  EXPECT_EQ(teacher.rows_run, 8);
  TeacherCacheReport stats = cache.TakeStats();
  EXPECT_EQ(stats.hits, 1);  // sample 0 the second time; the others were run for their step
  EXPECT_EQ(stats.misses, 8);
  EXPECT_EQ(stats.lookahead_off_reason, "");

  // New rows beside seen ones: the new rows and two seen ones, recomputed and compared.
  const Batch b3 = MakeBatch({0, 6}, {1, 0}), b4 = MakeBatch({1, 2}, {0, 1});
  ASSERT_OK(cache.Prefill({&b3, &b4}, Calls(teacher)));
  EXPECT_EQ(teacher.rows_run, 8 + 2 + 2);
  for (const Batch* batch : {&b3, &b4}) {
    ASSERT_OK_AND_ASSIGN(TeacherValues got, cache.Run(*batch, Calls(teacher)));
    ExpectSameAsDirect(got, *batch, teacher);
  }
  EXPECT_EQ(teacher.rows_run, 12);
  stats = cache.TakeStats();
  EXPECT_EQ(stats.hits + stats.misses, 4);  // each row served or run, once
  EXPECT_TRUE(cache.enabled());
}

TEST(TeacherCacheTest, LookAheadOfABatchDependentTeacherTurnsItselfOff) {
  FakeTeacher teacher;
  teacher.batch_bias = 1e-3;
  TeacherCache cache({.num_transforms = 1, .memory_bytes = 1 << 20, .spill_path = "unused"});
  const Batch b0 = MakeBatch({0, 1}, {0, 0}), b1 = MakeBatch({2, 3}, {0, 0});
  ASSERT_OK(cache.Prefill({&b0, &b1}, Calls(teacher)));
  EXPECT_EQ(teacher.rows_run, 2 + 4);
  EXPECT_TRUE(cache.HasMisses(b0));  // nothing stored
  EXPECT_THAT(cache.TakeStats().lookahead_off_reason,
              HasSubstr("differently in the look-ahead's batch of 4 rows than in the step's "
                        "batch of 2"));
  // Off for good; the batches run as they would without it.
  ASSERT_OK(cache.Prefill({&b0, &b1}, Calls(teacher)));
  EXPECT_EQ(teacher.rows_run, 6);
  ASSERT_OK_AND_ASSIGN(TeacherValues got, cache.Run(b0, Calls(teacher)));
  ExpectSameAsDirect(got, b0, teacher);
}

TEST(TeacherCacheTest, SpillsBeyondItsMemoryAndStaysExact) {
  const std::string spill = ::testing::TempDir() + "/teacher_cache.spill.bin";
  FakeTeacher teacher;
  {
    TeacherCache cache({.num_transforms = 2, .memory_bytes = 3 * 40, .spill_path = spill});
    const Batch first = MakeBatch({0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 0, 1, 0, 1, 0, 1});
    ASSERT_OK(cache.Run(first, Calls(teacher)).status());
    EXPECT_TRUE(std::filesystem::exists(spill));
    EXPECT_EQ(std::filesystem::file_size(spill), 5 * 40u);
    const Batch again = MakeBatch({7, 6, 5, 4, 3, 2, 1, 0}, {1, 0, 1, 0, 1, 0, 1, 0});
    ASSERT_OK_AND_ASSIGN(TeacherValues got, cache.Run(again, Calls(teacher)));
    EXPECT_EQ(teacher.rows_run, 8);
    ExpectSameAsDirect(got, again, teacher);
    const TeacherCacheReport stats = cache.TakeStats();
    EXPECT_EQ(stats.bytes_memory, 3 * 40);
    EXPECT_EQ(stats.bytes_disk, 5 * 40);
  }
  EXPECT_FALSE(std::filesystem::exists(spill));  // removed with the cache
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A symbolic link where the spill goes (planted in the run folder) is never written through:
// its target keeps its bytes, the cache turns off saying why, and the values stay exact.
TEST(TeacherCacheTest, ASymlinkInPlaceOfTheSpillIsNotWrittenThrough) {
  const std::string dir = ::testing::TempDir() + "/spill_symlink";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string target = dir + "/precious.txt", spill = dir + "/teacher_cache.stage0.bin";
  std::ofstream(target) << "a user's file\n";
  std::filesystem::create_symlink(target, spill);
  FakeTeacher teacher;
  TeacherCache cache({.num_transforms = 2, .memory_bytes = 3 * 40, .spill_path = spill});
  const Batch first = MakeBatch({0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 0, 1, 0, 1, 0, 1});
  ASSERT_OK_AND_ASSIGN(TeacherValues got, cache.Run(first, Calls(teacher)));
  ExpectSameAsDirect(got, first, teacher);
  EXPECT_EQ(ReadAll(target), "a user's file\n");
  EXPECT_TRUE(std::filesystem::is_symlink(spill));
  EXPECT_FALSE(cache.enabled());
  EXPECT_EQ(cache.TakeStats().off_reason,
            "the spill file " + spill +
                " is a symbolic link, which libkd does not write through: remove it");
}

// With mode ON, a spill the cache cannot write is an error, not a cache quietly off.
TEST(TeacherCacheTest, ARequiredCacheThatCannotSpillIsAnError) {
  const std::string dir = ::testing::TempDir() + "/spill_required";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/teacher_cache.stage0.bin");  // a folder in place
  FakeTeacher teacher;
  TeacherCache cache({.num_transforms = 2,
                      .memory_bytes = 3 * 40,
                      .spill_path = dir + "/teacher_cache.stage0.bin",
                      .required = true});
  const Batch first = MakeBatch({0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 0, 1, 0, 1, 0, 1});
  EXPECT_THAT(cache.Run(first, Calls(teacher)).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("teacher_cache: mode ON, but the cache had to turn off: the "
                                 "spill file " + dir + "/teacher_cache.stage0.bin is not a "
                                 "regular file")));
}

// A regular file left where the spill goes (a killed run's) is replaced, and the rows read back.
TEST(TeacherCacheTest, ALeftoverSpillIsReplaced) {
  const std::string spill = ::testing::TempDir() + "/teacher_cache.leftover.bin";
  std::ofstream(spill) << std::string(1000, 'x');
  FakeTeacher teacher;
  TeacherCache cache({.num_transforms = 2, .memory_bytes = 3 * 40, .spill_path = spill});
  const Batch first = MakeBatch({0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 0, 1, 0, 1, 0, 1});
  ASSERT_OK(cache.Run(first, Calls(teacher)).status());
  EXPECT_EQ(std::filesystem::file_size(spill), 5 * 40u);
  ASSERT_OK_AND_ASSIGN(TeacherValues got, cache.Run(first, Calls(teacher)));
  ExpectSameAsDirect(got, first, teacher);
  EXPECT_TRUE(cache.enabled());
}

// The spill's budget: a row past it turns the cache off and removes the file; the run goes on
// with the teacher's own values.
TEST(TeacherCacheTest, ASpillPastItsBudgetTurnsTheCacheOffAndIsRemoved) {
  const std::string spill = ::testing::TempDir() + "/teacher_cache.budget.bin";
  FakeTeacher teacher;
  TeacherCache cache({.num_transforms = 2,
                      .memory_bytes = 3 * 40,
                      .spill_path = spill,
                      .disk_bytes = 2 * 40});
  const Batch first = MakeBatch({0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 0, 1, 0, 1, 0, 1});
  ASSERT_OK_AND_ASSIGN(TeacherValues got, cache.Run(first, Calls(teacher)));
  ExpectSameAsDirect(got, first, teacher);
  EXPECT_FALSE(cache.enabled());
  EXPECT_FALSE(std::filesystem::exists(spill));
  const TeacherCacheReport stats = cache.TakeStats();
  EXPECT_EQ(stats.off_reason, "the spill file " + spill +
                                  " reached its budget of 80 bytes (teacher_cache.disk_mib, at "
                                  "most half the disk's free space)");
  EXPECT_EQ(stats.bytes_disk, 0);
  teacher.rows_run = 0;
  ASSERT_OK_AND_ASSIGN(got, cache.Run(first, Calls(teacher)));
  ExpectSameAsDirect(got, first, teacher);
  EXPECT_EQ(teacher.rows_run, 8);  // off: the teacher runs every row
}

// A spilled row changed on disk mid-run (a checksum per row) is never served: the batch is
// recomputed and the cache turns off; required, it is an error naming the row.
TEST(TeacherCacheTest, ATamperedSpillRowIsNeverServed) {
  for (const bool required : {false, true}) {
    const std::string spill = ::testing::TempDir() + "/teacher_cache.tamper.bin";
    FakeTeacher teacher;
    TeacherCache cache({.num_transforms = 2,
                        .memory_bytes = 3 * 40,
                        .spill_path = spill,
                        .required = required});
    const Batch first = MakeBatch({0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 0, 1, 0, 1, 0, 1});
    ASSERT_OK(cache.Run(first, Calls(teacher)).status());
    {
      std::fstream file(spill, std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(40 + 3);  // row 1 on disk
      file.put('\x5a');
    }
    absl::StatusOr<TeacherValues> got = cache.Run(first, Calls(teacher));
    if (required) {
      EXPECT_THAT(got.status(),
                  StatusIs(absl::StatusCode::kDataLoss,
                           HasSubstr("the spill file " + spill +
                                     ": row 1 changed on disk after it was written")));
    } else {
      ASSERT_OK(got.status());
      ExpectSameAsDirect(*got, first, teacher);
      EXPECT_THAT(cache.TakeStats().off_reason, HasSubstr("row 1 changed on disk"));
    }
    EXPECT_FALSE(cache.enabled());
    EXPECT_FALSE(std::filesystem::exists(spill));
  }
}

TEST(TeacherCacheTest, BatchDependentTeacherTurnsItOff) {
  FakeTeacher teacher;
  teacher.batch_bias = 1e-3;
  TeacherCache cache({.num_transforms = 1, .memory_bytes = 1 << 20, .spill_path = "unused"});
  ASSERT_OK(cache.Run(MakeBatch({0, 1, 2, 3}, {0, 0, 0, 0}), Calls(teacher)).status());
  const Batch mixed = MakeBatch({0, 1, 2, 9}, {0, 0, 0, 0});
  ASSERT_OK_AND_ASSIGN(TeacherValues got, cache.Run(mixed, Calls(teacher)));
  EXPECT_FALSE(cache.enabled());
  // The batch the check failed on is computed whole, as without the cache.
  ExpectSameAsDirect(got, mixed, teacher);
  EXPECT_THAT(cache.TakeStats().off_reason, HasSubstr("depend on the batch"));

  FakeTeacher strict_teacher;
  strict_teacher.batch_bias = 1e-3;
  TeacherCache strict({.num_transforms = 1, .memory_bytes = 1 << 20, .spill_path = "unused",
                       .required = true});
  ASSERT_OK(strict.Run(MakeBatch({0, 1, 2, 3}, {0, 0, 0, 0}), Calls(strict_teacher)).status());
  EXPECT_THAT(strict.Run(mixed, Calls(strict_teacher)).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("mode: OFF")));
}

TEST(TeacherCacheTest, ValuesThatAreNotRowsAreNamed) {
  FakeTeacher teacher;
  teacher.tuple_io = true;
  TeacherCache strict({.num_transforms = 1, .memory_bytes = 1 << 20, .spill_path = "unused",
                       .required = true});
  EXPECT_THAT(strict.Run(MakeBatch({0, 1}, {0, 0}), Calls(teacher)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("io[\"feat\"][\"input\"] is a Tuple")));
  TeacherCache automatic({.num_transforms = 1, .memory_bytes = 1 << 20, .spill_path = "unused"});
  ASSERT_OK(automatic.Run(MakeBatch({0, 1}, {0, 0}), Calls(teacher)).status());
  EXPECT_FALSE(automatic.enabled());
  ASSERT_OK(automatic.Run(MakeBatch({0, 1}, {0, 0}), Calls(teacher)).status());
  EXPECT_EQ(teacher.rows_run, 2 + 2 + 2);  // off: every batch runs
}

TEST(TeacherCacheTest, ValuesThatChangeShapeTurnItOff) {
  FakeTeacher teacher;
  TeacherCache cache({.num_transforms = 1, .memory_bytes = 1 << 20, .spill_path = "unused"});
  ASSERT_OK(cache.Run(MakeBatch({0, 1}, {0, 0}), Calls(teacher)).status());
  teacher.wide = true;
  const Batch next = MakeBatch({2, 3}, {0, 0});
  ASSERT_OK_AND_ASSIGN(TeacherValues got, cache.Run(next, Calls(teacher)));
  EXPECT_FALSE(cache.enabled());
  EXPECT_TRUE(at::equal(got.io.at("feat").at("output").toTensor(),
                        teacher(next)->io.at("feat").at("output").toTensor()));
  EXPECT_THAT(cache.TakeStats().off_reason, HasSubstr("changed its shape or dtype"));

  FakeTeacher strict_teacher;
  TeacherCache strict({.num_transforms = 1, .memory_bytes = 1 << 20, .spill_path = "unused",
                       .required = true});
  ASSERT_OK(strict.Run(MakeBatch({0, 1}, {0, 0}), Calls(strict_teacher)).status());
  strict_teacher.wide = true;
  EXPECT_THAT(strict.Run(MakeBatch({0, 5}, {0, 0}), Calls(strict_teacher)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("changed its shape")));
}

TEST(TeacherCacheTest, OneRowBatchesAndUnkeyedBatchesRunAsTheyAre) {
  FakeTeacher teacher;
  TeacherCache cache({.num_transforms = 2, .memory_bytes = 1 << 20, .spill_path = "unused"});
  ASSERT_OK(cache.Run(MakeBatch({4}, {1}), Calls(teacher)).status());
  ASSERT_OK(cache.Run(MakeBatch({4}, {1}), Calls(teacher)).status());
  EXPECT_EQ(teacher.rows_run, 2);  // a batch of one is neither served nor stored
  Batch unkeyed = MakeBatch({0, 1}, {0, 0});
  unkeyed.supp = c10::IValue();
  ASSERT_OK(cache.Run(unkeyed, Calls(teacher)).status());
  ASSERT_OK(cache.Run(unkeyed, Calls(teacher)).status());
  EXPECT_EQ(teacher.rows_run, 2 + 4);
  EXPECT_TRUE(cache.enabled());
}

}  // namespace
}  // namespace boxes_internal
}  // namespace kd
