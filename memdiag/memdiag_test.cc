// memdiag on known allocations: a deliberate leak (outputs kept across
// evaluation batches) found with its bucket and its holder, a clean loop with
// an empty diff, a small view's true storage size, scopes and sequence numbers
// from the tracking allocator, and the leak callback's options.
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "memdiag/inventory.h"
#include "memdiag/leak_detection.h"
#include "memdiag/tracking_allocator.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::StartsWith;

class MemdiagTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    TrackingAllocator::Install();
  }
};

// An evaluation batch: a temporary and an output of (64, 64) float32 (16384
// bytes each); `keep` keeps the output (the leak).
void EvalBatch(std::vector<at::Tensor>* keep, int64_t step) {
  ScopedMemoryAnnotation scope("eval", step);
  const at::Tensor input = at::ones({64, 64});
  at::Tensor output = input * 2;
  if (keep != nullptr) keep->push_back(output);
}

TEST_F(MemdiagTest, AllocationsCarryTheirScopeAndOrder) {
  TrackingAllocator& tracker = TrackingAllocator::Install();
  at::Tensor outside = at::empty({10}, at::kFloat);
  at::Tensor inside, nested;
  {
    ScopedMemoryAnnotation eval("eval", 7);
    inside = at::empty({20}, at::kFloat);
    {
      ScopedMemoryAnnotation teacher("teacher_forward");
      nested = at::empty({30}, at::kFloat);
    }
  }
  Allocation a, b, c;
  ASSERT_TRUE(tracker.FindAllocation(outside.data_ptr(), &a));
  ASSERT_TRUE(tracker.FindAllocation(inside.data_ptr(), &b));
  ASSERT_TRUE(tracker.FindAllocation(nested.data_ptr(), &c));
  EXPECT_EQ(a.nbytes, 40u);
  EXPECT_EQ(a.scope, "");
  EXPECT_EQ(b.scope, "eval");
  EXPECT_EQ(b.step, 7);
  EXPECT_EQ(c.scope, "teacher_forward");
  EXPECT_EQ(c.step, -1);
  EXPECT_LT(a.seq, b.seq);
  EXPECT_LT(b.seq, c.seq);
  const void* freed = nested.data_ptr();
  nested.reset();
  EXPECT_FALSE(tracker.FindAllocation(freed, &c));
}

// Threads allocating and freeing at once leave the live set as it was.
TEST_F(MemdiagTest, TrackingIsThreadSafe) {
  TrackingAllocator& tracker = TrackingAllocator::Install();
  const int64_t live = tracker.live_bytes();
  const size_t count = tracker.LiveAllocations().size();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      std::vector<at::Tensor> held;
      for (int i = 0; i < 2000; ++i) {
        held.push_back(at::empty({i % 7 + 1}, at::kFloat));
        if (held.size() > 16) held.erase(held.begin());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(tracker.live_bytes(), live);
  EXPECT_EQ(tracker.LiveAllocations().size(), count);
}

// After Uninstall new tensors are not tracked; tracked ones still free through
// the tracker.
TEST_F(MemdiagTest, UninstallStopsTrackingNewTensors) {
  TrackingAllocator& tracker = TrackingAllocator::Install();
  at::Tensor tracked = at::empty({100}, at::kFloat);
  TrackingAllocator::Uninstall();
  EXPECT_FALSE(TrackingAllocator::installed());
  const int64_t live = tracker.live_bytes();
  at::Tensor untracked = at::empty({100}, at::kFloat);
  Allocation a;
  EXPECT_FALSE(tracker.FindAllocation(untracked.data_ptr(), &a));
  EXPECT_EQ(tracker.live_bytes(), live);
  tracked.reset();
  EXPECT_EQ(tracker.live_bytes(), live - 400);
  TrackingAllocator::Install();
  EXPECT_TRUE(TrackingAllocator::installed());
}

// The leak, held by a registered container: the diff between batches 2 and 5 is
// one bucket of three (64, 64) float32 tensors, 3 x 16384 bytes, held by
// kept[...].
TEST_F(MemdiagTest, LeakHeldByARegisteredContainerIsNamed) {
  std::vector<at::Tensor> kept;
  MemoryRoots roots;
  roots.AddTensors("kept", &kept);
  TensorInventory tensors_before;
  StorageInventory storages_before;
  for (int64_t batch = 1; batch <= 6; ++batch) {
    if (batch == 2) {
      tensors_before = CollectTensorInventory(roots);
      storages_before = CollectStorageInventory(roots);
    }
    if (batch == 5) {
      const TensorDiff tensors =
          DiffTensorInventories(tensors_before, CollectTensorInventory(roots));
      ASSERT_EQ(tensors.buckets.size(), 1u);
      EXPECT_THAT(tensors.buckets[0].shape, ElementsAre(64, 64));
      EXPECT_EQ(tensors.buckets[0].dtype, "torch.float32");
      EXPECT_EQ(tensors.buckets[0].device, "cpu");
      EXPECT_EQ(tensors.buckets[0].count, 3);
      EXPECT_EQ(tensors.total_bytes, 3 * 16384);
      EXPECT_EQ(tensors.buckets[0].example_path, "kept[1]");

      std::ostringstream log;
      const StorageDiff storages =
          LogStorageDiff(storages_before, CollectStorageInventory(roots), "eval", 30, log);
      ASSERT_FALSE(storages.buckets.empty());
      EXPECT_EQ(storages.buckets[0].nbytes, 16384);
      EXPECT_EQ(storages.buckets[0].count, 3);
      EXPECT_EQ(storages.buckets[0].representative_dtype, "torch.float32");
      EXPECT_EQ(storages.buckets[0].example_owner, "kept[1]");
      EXPECT_THAT(log.str(), StartsWith("STORAGE_DIFF [eval] NEW storages: count="));
      EXPECT_THAT(log.str(), HasSubstr("NEW storage 0.0MiB on cpu  x3  total=0.0MiB  (rep: (64, "
                                       "64) torch.float32)"));
      EXPECT_THAT(DescribeOwners(roots, kept[2].data_ptr()),
                  ElementsAre("kept[2] (64, 64) torch.float32"));
    }
    EvalBatch(&kept, batch);
  }
}

// The same leak in a container nobody registered: the storage diff still finds
// the three storages through the tracking allocator, as unowned, with the scope
// and step they came from.
TEST_F(MemdiagTest, UnownedLeakIsFoundWithItsScope) {
  std::vector<at::Tensor> hidden;
  MemoryRoots roots;
  StorageInventory before;
  for (int64_t batch = 1; batch <= 6; ++batch) {
    if (batch == 2) before = CollectStorageInventory(roots);
    if (batch == 5) {
      const StorageDiff diff = DiffStorageInventories(before, CollectStorageInventory(roots));
      ASSERT_FALSE(diff.buckets.empty());
      const StorageDiffBucket& leak = diff.buckets[0];
      EXPECT_EQ(leak.nbytes, 16384);
      EXPECT_EQ(leak.count, 3);
      EXPECT_EQ(leak.representative_dtype, "unknown");
      EXPECT_THAT(leak.example_owner,
                  MatchesRegex("unowned: 16384 bytes allocated in scope \"eval\" step [234] "
                               "\\(#[0-9]+\\)"));
      EXPECT_THAT(DescribeOwners(roots, hidden[3].data_ptr()),
                  ElementsAre(MatchesRegex("unowned: 16384 bytes allocated in scope \"eval\" "
                                           "step 4 \\(#[0-9]+\\)")));
    }
    EvalBatch(&hidden, batch);
  }
}

// Nothing kept: both diffs are empty.
TEST_F(MemdiagTest, CleanLoopHasAnEmptyDiff) {
  std::vector<at::Tensor> kept;
  MemoryRoots roots;
  roots.AddTensors("kept", &kept);
  StorageInventory before;
  TensorInventory tensors_before;
  for (int64_t batch = 1; batch <= 6; ++batch) {
    if (batch == 3) {
      before = CollectStorageInventory(roots);
      tensors_before = CollectTensorInventory(roots);
    }
    EvalBatch(nullptr, batch);
  }
  const StorageDiff diff = DiffStorageInventories(before, CollectStorageInventory(roots));
  EXPECT_EQ(diff.count(), 0) << diff.buckets.front().example_owner;
  EXPECT_EQ(DiffTensorInventories(tensors_before, CollectTensorInventory(roots)).count(), 0);
}

// A two-element view of a 4 MiB buffer: the tensor is 8 bytes, its storage 4
// MiB.
TEST_F(MemdiagTest, SmallViewShowsItsStoragesTrueSize) {
  at::Tensor view = at::zeros({1024, 1024}).select(0, 3).narrow(0, 0, 2);
  MemoryRoots roots;
  roots.AddTensor("view", &view);
  const TensorInventory tensors = CollectTensorInventory(roots);
  ASSERT_EQ(tensors.size(), 1u);
  EXPECT_EQ(tensors.begin()->second.nbytes, 8);
  const StorageInventory storages = CollectStorageInventory(roots, {.include_unowned = false});
  ASSERT_EQ(storages.size(), 1u);
  const StorageInfo& info = storages.begin()->second;
  EXPECT_EQ(info.nbytes, 4 << 20);
  EXPECT_EQ(info.num_views, 1);
  EXPECT_THAT(info.view_shapes, ElementsAre(ElementsAre(2)));
  EXPECT_THAT(info.owners, ElementsAre("view"));
  EXPECT_EQ(ShapeTuple(info.view_shapes[0]), "(2,)");
  EXPECT_EQ(ShapeTuple({}), "()");
}

// Several views of one storage: each tensor counted once however many roots hold it, distinct
// shapes most dims first, the representative the first view met.
TEST_F(MemdiagTest, ViewsOfOneStorage) {
  at::Tensor flat = at::zeros({12});
  at::Tensor grid = flat.view({3, 4});
  at::Tensor same = flat.view({12});
  MemoryRoots roots;
  roots.AddTensor("a_flat", &flat);
  roots.AddTensor("b_grid", &grid);
  roots.AddTensor("c_flat_again", &flat);
  roots.AddTensor("d_same_shape", &same);
  const StorageInventory storages = CollectStorageInventory(roots, {.include_unowned = false});
  ASSERT_EQ(storages.size(), 1u);
  const StorageInfo& info = storages.at(flat.data_ptr());
  EXPECT_EQ(info.num_views, 3);  // flat, grid, same: flat twice is one view
  EXPECT_THAT(info.view_shapes, ElementsAre(ElementsAre(3, 4), ElementsAre(12)));
  EXPECT_THAT(info.representative_shape(), ElementsAre(12));
  EXPECT_EQ(info.dtype_name(), "torch.float32");
  EXPECT_EQ(info.device_name(), "cpu");
  EXPECT_THAT(info.owners, ElementsAre("a_flat", "b_grid", "c_flat_again", "d_same_shape"));
  EXPECT_FALSE(storages.contains(grid.data_ptr<float>() + 1));
  EXPECT_EQ(storages.find(nullptr), storages.end());
}

// The same for a storage met after a hundred others (its entry is not the first): a tensor held
// twice is still one view.
TEST_F(MemdiagTest, ViewsOfAStorageMetLater) {
  std::vector<at::Tensor> others;
  for (int i = 0; i < 100; ++i) others.push_back(at::zeros({2}));
  at::Tensor flat = at::zeros({12});
  at::Tensor grid = flat.view({3, 4});
  MemoryRoots roots;
  roots.AddTensors("a_others", &others);
  roots.AddTensor("b_flat", &flat);
  roots.AddTensor("c_grid", &grid);
  roots.AddTensor("d_flat_again", &flat);
  for (const bool unowned : {false, true}) {
    const StorageInventory storages = CollectStorageInventory(roots, {.include_unowned = unowned});
    const StorageInfo& info = storages.at(flat.data_ptr());
    EXPECT_EQ(info.num_views, 2);
    EXPECT_THAT(info.view_shapes, ElementsAre(ElementsAre(3, 4), ElementsAre(12)));
    EXPECT_THAT(info.owners, ElementsAre("b_flat", "c_grid", "d_flat_again"));
    EXPECT_EQ(storages.at(others[99].data_ptr()).num_views, 1);
    EXPECT_THAT(storages.at(others[99].data_ptr()).owners, ElementsAre("a_others[99]"));
  }
}

// A root that walks a model-like holder names grads by path.
TEST_F(MemdiagTest, RootsNameWhatTheyHold) {
  at::Tensor weight = at::ones({3}).requires_grad_(true);
  (weight * 2).sum().backward();
  MemoryRoots roots;
  roots.Add("student", [&](const TensorVisitor& visit) {
    visit("student.fc.weight", weight);
    visit("student.fc.weight.grad", weight.grad());
  });
  EXPECT_THAT(DescribeOwners(roots, weight.grad().data_ptr()),
              ElementsAre("student.fc.weight.grad (3,) torch.float32"));
  EXPECT_EQ(CollectTensorInventory(roots).size(), 2u);
  EXPECT_THAT(roots.names(), ElementsAre("student"));
}

TEST_F(MemdiagTest, MemoryStatsLine) {
  EXPECT_THAT(FormatMemoryStats(),
              MatchesRegex("alloc=[0-9]+\\.[0-9]{3}GiB reserved=[0-9]+\\.[0-9]{3}GiB "
                           "peak=[0-9]+\\.[0-9]{3}GiB"));
  // This binary does not link //memdiag:cuda_memory: it cannot see CUDA memory and says what to
  // link (cuda_memory_test checks the linked answers).
  EXPECT_EQ(FormatMemoryStats(c10::Device("cuda:0")),
            "this binary has no memdiag CUDA support (link //memdiag:cuda_memory, which brings "
            "@libtorch//:cuda)");
}

// The callback with silverspoon-kd's options: its ValueErrors, then the leak
// found between batches 2 and 5 and a history snapshot written at batch 4.
TEST_F(MemdiagTest, LeakDetectionCallbackFindsTheLeak) {
  std::ostringstream log;
  EXPECT_THAT(MemoryLeakDetectionCallback::Create({.snapshot_at_batch = 3}, nullptr, &log),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("snapshot_path is required")));
  EXPECT_THAT(MemoryLeakDetectionCallback::Create(
                  {.diff_between_batches = std::pair<int64_t, int64_t>(5, 5)}, nullptr, &log),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("got (5, 5)")));

  std::vector<at::Tensor> kept;
  MemoryRoots roots;
  roots.AddTensors("kept", &kept);
  const std::string snapshot = test::TempPath("leak/snapshot.pickle");
  auto callback = MemoryLeakDetectionCallback::Create(
      {.diff_between_batches = std::pair<int64_t, int64_t>(2, 5),
       .snapshot_at_batch = 4,
       .snapshot_path = snapshot,
       .log_first_n_batches = 2,
       .max_diff_buckets = 5},
      &roots, &log);
  ASSERT_THAT(callback, IsOk());
  for (int64_t batch = 1; batch <= 6; ++batch) {
    (*callback)->OnPredictionStep();
    EvalBatch(&kept, batch);
  }
  (*callback)->OnEvaluate();
  ASSERT_TRUE((*callback)->last_tensor_diff().has_value());
  EXPECT_EQ((*callback)->last_tensor_diff()->count(), 3);
  EXPECT_EQ((*callback)->last_storage_diff()->buckets.at(0).count, 3);
  EXPECT_THAT(log.str(), HasSubstr("MEMORY [eval_batch_1] alloc="));
  EXPECT_THAT(log.str(), HasSubstr("TENSOR_DIFF [eval_batches_2_to_5] NEW tensors: count=3"));
  EXPECT_THAT(log.str(), HasSubstr("MEMORY_SNAPSHOT: dumped to " + snapshot));
  EXPECT_TRUE(std::ifstream(snapshot).good());
}

}  // namespace
}  // namespace kd
