#include "distill/data/data_loader.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include "distill/data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace {

using test::IValueNear;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

// Sample i is the image (1, 1, 1) holding i plus a uniform draw in [0, 1) from the batch's
// generator (a stand-in for a random transform); its target is i % 3.
class IndexDataset final : public Dataset {
 public:
  explicit IndexDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  int64_t num_classes() const override { return 3; }

 protected:
  Samples GetSamples(const at::Tensor& indices, at::Generator& generator) const override {
    const at::Tensor noise = at::rand({indices.size(0)}, generator);
    return {(indices.to(at::kFloat) + noise).view({-1, 1, 1, 1}), indices.remainder(3)};
  }

 private:
  int64_t n_;
};

DataLoader MakeLoader(int64_t n, DataLoaderOptions options) {
  absl::StatusOr<DataLoader> loader =
      DataLoader::Create(std::make_shared<IndexDataset>(n), options);
  EXPECT_THAT(loader, IsOk());
  return *std::move(loader);
}

// The dataset indices of every batch of the current epoch, in order.
std::vector<int64_t> EpochOrder(const DataLoader& loader) {
  std::vector<int64_t> order;
  for (const Batch& batch : loader) {
    const at::Tensor indices =
        c10::impl::toTypedDict<std::string, at::Tensor>(batch.supp.toGenericDict()).at("indices");
    // The samples are those of the indices.
    EXPECT_TRUE(batch.samples.toTensor().flatten().floor().equal(indices.to(at::kFloat)));
    for (int64_t i = 0; i < indices.size(0); ++i) order.push_back(indices[i].item<int64_t>());
  }
  return order;
}

std::vector<int64_t> Sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<int64_t> Range(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

TEST(DataLoaderTest, CreateRejectsBadOptions) {
  EXPECT_THAT(
      DataLoader::Create(std::make_shared<IndexDataset>(4), {.batch_size = 0}),
      StatusIs(absl::StatusCode::kInvalidArgument, "DataLoader: batch_size must be >= 1; got 0"));
  EXPECT_THAT(DataLoader::Create(nullptr, {}), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(DataLoaderTest, SequentialWithoutShuffle) {
  DataLoader loader = MakeLoader(10, {.batch_size = 4});
  EXPECT_EQ(loader.num_batches(), 3);
  EXPECT_THAT(EpochOrder(loader), ElementsAreArray(Range(10)));
  loader.SetEpoch(5);
  EXPECT_THAT(EpochOrder(loader), ElementsAreArray(Range(10)));
  EXPECT_EQ(loader.GetBatch(2).samples.toTensor().size(0), 2);
}

TEST(DataLoaderTest, EveryIndexOncePerEpoch) {
  DataLoader loader = MakeLoader(103, {.batch_size = 10, .shuffle = true, .seed = 1});
  EXPECT_EQ(loader.num_batches(), 11);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    loader.SetEpoch(epoch);
    const std::vector<int64_t> order = EpochOrder(loader);
    EXPECT_THAT(Sorted(order), ElementsAreArray(Range(103))) << "epoch " << epoch;
    EXPECT_NE(order, Range(103)) << "epoch " << epoch << " is not shuffled";
  }
}

TEST(DataLoaderTest, NewOrderEachEpochSameForSameSeedAndEpoch) {
  DataLoader a = MakeLoader(100, {.batch_size = 8, .shuffle = true, .seed = 3});
  DataLoader b = MakeLoader(100, {.batch_size = 8, .shuffle = true, .seed = 3});
  DataLoader other_seed = MakeLoader(100, {.batch_size = 8, .shuffle = true, .seed = 4});
  const std::vector<int64_t> epoch0 = EpochOrder(a);
  a.SetEpoch(1);
  const std::vector<int64_t> epoch1 = EpochOrder(a);
  EXPECT_NE(epoch0, epoch1);
  EXPECT_EQ(EpochOrder(b), epoch0);
  EXPECT_NE(EpochOrder(other_seed), epoch0);
  // Going back to an epoch gives its order again.
  b.SetEpoch(1);
  EXPECT_EQ(EpochOrder(b), epoch1);
  a.SetEpoch(0);
  EXPECT_EQ(EpochOrder(a), epoch0);
}

TEST(DataLoaderTest, ShuffleIsPythonDistributedSamplers) {
  // Recorded from Python torch 2.14:
  //   s = torch.utils.data.DistributedSampler(range(10), num_replicas=1, rank=0,
  //                                           shuffle=True, seed=7)
  //   s.set_epoch(3); list(s)
  DataLoader loader = MakeLoader(10, {.batch_size = 4, .shuffle = true, .seed = 7});
  loader.SetEpoch(3);
  EXPECT_THAT(EpochOrder(loader), ElementsAre(7, 4, 6, 1, 3, 5, 9, 8, 2, 0));
}

// Shards of a multi-process run, against Python's DistributedSampler (torch 2.14):
//   s = DistributedSampler(range(n), num_replicas=r, rank=k, shuffle=..., seed=..., drop_last=...)
//   s.set_epoch(e); list(s)
TEST(DataLoaderTest, ShardsArePythonDistributedSamplers) {
  struct Case {
    int64_t n, replicas;
    bool shuffle, drop_uneven;
    uint64_t seed;
    int64_t epoch;
    std::vector<std::vector<int64_t>> shards;  // by rank
  };
  const std::vector<Case> cases = {
      {10, 3, true, false, 7, 3, {{7, 1, 9, 0}, {4, 3, 8, 7}, {6, 5, 2, 4}}},
      {10, 3, true, true, 7, 3, {{7, 1, 9}, {4, 3, 8}, {6, 5, 2}}},
      {10, 4, false, false, 0, 0, {{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}}},
      {5, 4, true, false, 1, 2, {{1, 2}, {0, 1}, {3, 0}, {4, 3}}},
  };
  for (const Case& c : cases) {
    for (int64_t rank = 0; rank < c.replicas; ++rank) {
      DataLoader loader = MakeLoader(c.n, {.batch_size = 2,
                                           .shuffle = c.shuffle,
                                           .seed = c.seed,
                                           .num_replicas = c.replicas,
                                           .rank = rank,
                                           .drop_uneven = c.drop_uneven});
      loader.SetEpoch(c.epoch);
      EXPECT_EQ(EpochOrder(loader), c.shards[rank]) << "n " << c.n << " rank " << rank;
      EXPECT_EQ(loader.num_batches(), (static_cast<int64_t>(c.shards[rank].size()) + 1) / 2);
    }
  }
  // Without padding, every sample is in exactly one shard.
  std::vector<int64_t> all;
  for (int64_t rank = 0; rank < 4; ++rank) {
    DataLoader loader = MakeLoader(
        100, {.batch_size = 8, .shuffle = true, .seed = 5, .num_replicas = 4, .rank = rank});
    loader.SetEpoch(2);
    for (int64_t i : EpochOrder(loader)) all.push_back(i);
  }
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(100);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(all, expected);
  EXPECT_THAT(DataLoader::Create(std::make_shared<IndexDataset>(4),
                                 {.batch_size = 1, .num_replicas = 2, .rank = 2}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "DataLoader: rank 2 is not in [0, num_replicas=2)"));
}

// Evaluation's shards: 10 samples over 3 ranks are 4 + 3 + 3, nothing repeated (where
// DistributedSampler repeats 7 and 4 to give 4 each) and nothing dropped.
TEST(DataLoaderTest, ExactShardsPartitionTheSet) {
  const std::vector<std::vector<int64_t>> expected = {{7, 1, 9, 0}, {4, 3, 8}, {6, 5, 2}};
  for (int64_t rank = 0; rank < 3; ++rank) {
    DataLoader loader = MakeLoader(10, {.batch_size = 2,
                                        .shuffle = true,
                                        .seed = 7,
                                        .num_replicas = 3,
                                        .rank = rank,
                                        .exact_shards = true});
    loader.SetEpoch(3);
    EXPECT_EQ(EpochOrder(loader), expected[rank]) << rank;
  }
  // More ranks than samples: the last shards are empty.
  DataLoader empty =
      MakeLoader(2, {.batch_size = 2, .num_replicas = 3, .rank = 2, .exact_shards = true});
  EXPECT_EQ(empty.num_batches(), 0);
}

TEST(DataLoaderTest, DropLastDropsTheRemainder) {
  DataLoader loader = MakeLoader(10, {.batch_size = 3, .shuffle = true, .drop_last = true});
  EXPECT_EQ(loader.num_batches(), 3);
  const std::vector<int64_t> order = EpochOrder(loader);
  EXPECT_EQ(order.size(), 9u);
  // The dropped sample is the last of the epoch's order.
  const at::Tensor full = at::randperm(10, at::detail::createCPUGenerator(0), at::kLong);
  EXPECT_EQ(full[9].item<int64_t>(),
            10 * 9 / 2 - std::accumulate(order.begin(), order.end(), int64_t{0}));
  for (int64_t i = 0; i < loader.num_batches(); ++i) {
    EXPECT_EQ(loader.GetBatch(i).targets.toTensor().size(0), 3);
  }
  // Nothing to drop when the batch size divides the dataset.
  EXPECT_EQ(MakeLoader(9, {.batch_size = 3, .drop_last = true}).num_batches(), 3);
  EXPECT_EQ(MakeLoader(2, {.batch_size = 3, .drop_last = true}).num_batches(), 0);
  EXPECT_EQ(MakeLoader(2, {.batch_size = 3}).num_batches(), 1);
}

TEST(DataLoaderTest, TransformsDependOnSeedEpochAndBatchOnly) {
  DataLoader loader = MakeLoader(40, {.batch_size = 8, .shuffle = true, .seed = 11});
  loader.SetEpoch(2);
  const Batch batch = loader.GetBatch(3);
  // Again, in any order: the same batch.
  EXPECT_THAT(loader.GetBatch(1).samples, ::testing::Not(IValueNear(batch.samples, 0)));
  EXPECT_THAT(loader.GetBatch(3).samples, IValueNear(batch.samples, 0));
  // A resumed run: a new loader set to the same epoch.
  DataLoader resumed = MakeLoader(40, {.batch_size = 8, .shuffle = true, .seed = 11});
  resumed.SetEpoch(2);
  EXPECT_THAT(resumed.GetBatch(3).samples, IValueNear(batch.samples, 0));
  // The draws are those of TransformSeed(seed, epoch, batch).
  const at::Tensor indices = loader.BatchIndices(3);
  EXPECT_THAT(batch.samples,
              IValueNear(loader.dataset().Get(indices, TransformSeed(11, 2, 3)).samples, 0));
  // Without shuffling, another epoch has the same indices but other draws.
  DataLoader sequential = MakeLoader(40, {.batch_size = 8});
  const Batch first = sequential.GetBatch(0);
  sequential.SetEpoch(1);
  EXPECT_TRUE(sequential.BatchIndices(0).equal(at::arange(8, at::kLong)));
  EXPECT_THAT(sequential.GetBatch(0).samples, ::testing::Not(IValueNear(first.samples, 0)));
}

TEST(DataLoaderTest, IteratesEveryBatch) {
  DataLoader loader = MakeLoader(25, {.batch_size = 10});
  int64_t count = 0;
  std::vector<int64_t> sizes;
  for (DataLoader::Iterator it = loader.begin(); it != loader.end(); ++it) {
    EXPECT_EQ(it.index(), count++);
    sizes.push_back((*it).targets.toTensor().size(0));
  }
  EXPECT_THAT(sizes, ElementsAre(10, 10, 5));
}

TEST(DataLoaderTest, BatchOutOfRangeThrows) {
  DataLoader loader = MakeLoader(25, {.batch_size = 10});
  EXPECT_THROW(loader.GetBatch(3), c10::Error);
  EXPECT_THROW(loader.GetBatch(-1), c10::Error);
}

TEST(DataLoaderTest, WorksOnTheSyntheticDataset) {
  absl::StatusOr<std::shared_ptr<Dataset>> dataset =
      MakeDataset("synthetic", {{"num_samples", int64_t{50}}});
  ASSERT_THAT(dataset, IsOk());
  absl::StatusOr<DataLoader> loader =
      DataLoader::Create(*dataset, {.batch_size = 16, .shuffle = true});
  ASSERT_THAT(loader, IsOk());
  int64_t seen = 0;
  for (const Batch& batch : *loader) {
    EXPECT_EQ(batch.samples.toTensor().dim(), 4);
    seen += batch.targets.toTensor().size(0);
  }
  EXPECT_EQ(seen, 50);
}

// Batches that BatchStream's workers assemble are GetBatch's, bit for bit, in order: a batch is
// a function of (epoch, index) on any thread. The noise of IndexDataset stands for random
// transforms.
TEST(BatchStreamTest, WorkersGiveGetBatchsBatchesBitForBit) {
  for (const int workers : {0, 1, 3}) {
    for (const int prefetch : {1, 2}) {
      for (const int64_t first : {int64_t{0}, int64_t{5}}) {
        DataLoader loader = MakeLoader(103, {.batch_size = 8,
                                             .shuffle = true,
                                             .seed = 4,
                                             .num_workers = workers,
                                             .prefetch_factor = prefetch});
        loader.SetEpoch(2);
        BatchStream stream(loader, first);
        int64_t taken = 0;
        while (!stream.done()) {
          const int64_t i = stream.index();
          const Batch batch = stream.Next();
          const Batch expected = loader.GetBatch(i);
          ASSERT_TRUE(batch.samples.toTensor().equal(expected.samples.toTensor()))
              << "workers " << workers << " batch " << i;
          ASSERT_TRUE(batch.targets.toTensor().equal(expected.targets.toTensor()));
          ++taken;
        }
        EXPECT_EQ(taken, loader.num_batches() - first) << "workers " << workers;
      }
    }
  }
}

// The stream keeps the epoch it was made in, whatever the loader does afterwards.
TEST(BatchStreamTest, KeepsItsEpoch) {
  DataLoader loader = MakeLoader(40, {.batch_size = 8, .shuffle = true, .num_workers = 2});
  loader.SetEpoch(1);
  const Batch expected = loader.GetBatch(0);
  BatchStream stream(loader);
  loader.SetEpoch(2);
  EXPECT_TRUE(stream.Next().samples.toTensor().equal(expected.samples.toTensor()));
}

// Sample 7 cannot be assembled.
class FailingDataset final : public Dataset {
 public:
  int64_t size() const override { return 40; }
  int64_t num_classes() const override { return 2; }

 protected:
  Samples GetSamples(const at::Tensor& indices, at::Generator&) const override {
    TORCH_CHECK(!indices.eq(7).any().item<bool>(), "sample 7 is unreadable");
    return {indices.to(at::kFloat).view({-1, 1, 1, 1}), indices.remainder(2)};
  }
};

// A worker's error reaches the caller at the batch that failed, not before, as c10::Error.
TEST(BatchStreamTest, AWorkersErrorIsRethrownAtItsBatch) {
  absl::StatusOr<DataLoader> loader =
      DataLoader::Create(std::make_shared<FailingDataset>(), {.batch_size = 4, .num_workers = 2});
  ASSERT_THAT(loader, IsOk());
  BatchStream stream(*loader);
  EXPECT_NO_THROW(stream.Next());  // samples 0-3
  try {
    stream.Next();  // samples 4-7
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what_without_backtrace(), ::testing::HasSubstr("sample 7 is unreadable"));
  }
}

// A stream given up early stops its workers (the test would hang otherwise); Next past the end
// is a programming error.
TEST(BatchStreamTest, StopsEarlyAndRefusesPastTheEnd) {
  DataLoader loader = MakeLoader(1000, {.batch_size = 1, .num_workers = 3});
  {
    BatchStream stream(loader);
    stream.Next();
  }
  DataLoader small = MakeLoader(3, {.batch_size = 2, .num_workers = 1});
  BatchStream stream(small);
  stream.Next();
  stream.Next();
  EXPECT_TRUE(stream.done());
  EXPECT_THROW(stream.Next(), c10::Error);
}

// Records the intra-op thread count libtorch gives the threads that assemble batches.
class ParallelismProbe final : public Dataset {
 public:
  int64_t size() const override { return 8; }
  int64_t num_classes() const override { return 2; }
  mutable std::atomic<int> one_thread_calls{0}, more_thread_calls{0};

 protected:
  Samples GetSamples(const at::Tensor& indices, at::Generator&) const override {
    (at::get_num_threads() == 1 ? one_thread_calls : more_thread_calls)++;
    return {indices.to(at::kFloat).view({-1, 1, 1, 1}), indices.remainder(2)};
  }
};

// Workers run their batches' kernels on one intra-op thread each, so they never start thread
// teams of their own; the training thread keeps its intra-op threads.
TEST(BatchStreamTest, WorkersUseOneIntraOpThreadEach) {
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  auto probe = std::make_shared<ParallelismProbe>();
  absl::StatusOr<DataLoader> loader =
      DataLoader::Create(probe, {.batch_size = 2, .num_workers = 2});
  ASSERT_THAT(loader, IsOk());
  {
    BatchStream stream(*loader);
    while (!stream.done()) stream.Next();
  }
  EXPECT_EQ(probe->one_thread_calls.load(), 4);
  EXPECT_EQ(probe->more_thread_calls.load(), 0);
  EXPECT_EQ(at::get_num_threads(), 2);
  loader->GetBatch(0);
  EXPECT_EQ(probe->more_thread_calls.load(), 1);
  at::set_num_threads(before);
}

// A loader visits the samples in its sampler's order; Create asks the sampler whether it fits
// the dataset.
class FixedOrder final : public Sampler {
 public:
  at::Tensor Order(int64_t, uint64_t, int64_t) const override {
    return at::tensor(std::vector<int64_t>{4, 1, 3}, at::kLong);
  }
  absl::Status CheckDatasetSize(int64_t n) const override {
    return n >= 5 ? absl::OkStatus() : absl::InvalidArgumentError("needs 5 samples");
  }
};

TEST(DataLoaderTest, FollowsItsSampler) {
  DataLoader loader = MakeLoader(6, {.batch_size = 2, .sampler = std::make_shared<FixedOrder>()});
  EXPECT_THAT(EpochOrder(loader), ElementsAre(4, 1, 3));
  EXPECT_EQ(loader.num_batches(), 2);
  EXPECT_THAT(DataLoader::Create(std::make_shared<IndexDataset>(4),
                                 {.sampler = std::make_shared<FixedOrder>()}),
              StatusIs(absl::StatusCode::kInvalidArgument, "needs 5 samples"));
}

}  // namespace
}  // namespace kd
