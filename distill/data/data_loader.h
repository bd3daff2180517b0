// Batches of a dataset in a seeded, per-epoch order: torch.utils.data.DataLoader's batching
// with DistributedSampler's shuffling, random access by batch index so a resumed run picks up
// at any batch and reproduces it exactly.
//
//   KD_ASSIGN_OR_RETURN(kd::DataLoader loader,
//                       kd::DataLoader::Create(dataset, {.batch_size = 128, .shuffle = true,
//                                                        .seed = run_seed}));
//   for (int64_t epoch = start_epoch; epoch < num_epochs; ++epoch) {
//     loader.SetEpoch(epoch);
//     for (kd::Batch batch : loader) { ... }              // or GetBatch(i), i < num_batches()
//   }
//
// Order: with shuffle, epoch e visits the samples in the order torch.randperm(N, generator
// seeded with seed + e) gives — the order of Python's
// DistributedSampler(dataset, num_replicas=1, shuffle=True, seed=seed) after set_epoch(e);
// without, 0..N-1. Batch i holds positions [i * batch_size, (i + 1) * batch_size) of that
// order; its random transforms draw from a generator seeded with
// TransformSeed(seed, epoch, i) (distill/data/dataset.h). So a batch is a function of
// (dataset, options, epoch, i) alone: no state carries from one batch to the next.
//
// Why not libtorch's torch::data (samplers, make_data_loader, worker threads):
// - Reproducible order: torch::data::samplers::RandomSampler reshuffles from the global
//   generator on reset(), so its order depends on every random draw before it, not on
//   (seed, epoch); DistributedRandomSampler shuffles with std::shuffle and std::mt19937 seeded
//   by the epoch alone (no run seed; std::shuffle's order differs between standard libraries),
//   an order Python's samplers do not give.
// - Resume: its loader is a one-pass iterator; there is no batch i to jump to, and its
//   dataset's get_batch(indices) never learns the batch index that seeds the transforms here.
// - Batching: its datasets return one Example per sample, then Stack collates them (a loop
//   and a copy per sample); our datasets gather a whole batch with one index_select and
//   transform it with one call per transform.
// - Headers: torch/data.h brings in most of torch/torch.h (~15 s per translation unit here).
// Worker threads (num_workers, as torch.utils.data.DataLoader's): BatchStream assembles the
// next batches on that many background threads while the caller trains on the current one,
// and hands them out in order. A batch is the same function of (epoch, i) on any thread, so
// the results are bit-identical to num_workers 0 (tested). Each worker runs its tensor ops
// without intra-op parallelism (as PyTorch sets torch.set_num_threads(1) in its worker
// processes), so N workers use N cores besides the training thread's. What they buy depends on
// the share of a step spent assembling the batch: distill/data/data_loader_benchmark measures it
// (BM_Epoch: workers 0, 1, 2 over an augmentation-heavy pipeline).
//
// Errors: Create returns InvalidArgument for a null dataset, batch_size < 1 or a rank outside
// [0, num_replicas). GetBatch with
// i outside [0, num_batches()) throws c10::Error (a programming error, like an index out of
// range in libtorch).
#ifndef LIBKD_DISTILL_DATA_DATA_LOADER_H_
#define LIBKD_DISTILL_DATA_DATA_LOADER_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "distill/data/dataset.h"
#include "distill/data/sampler.h"
#include "distill/config/kwargs.h"
#include "distill/data/batch.h"

namespace kd {

// How a DataLoader batches (LoaderConfig's fields, with RunConfig.seed).
struct DataLoaderOptions {
  // Samples per batch; >= 1.
  int64_t batch_size = 1;
  // Visit the samples in a new random order every epoch. Default: in index order.
  bool shuffle = false;
  // Leave out the last batch when it has fewer than batch_size samples. Default: keep it.
  bool drop_last = false;
  // Seed of the shuffling and of the random transforms. Default: 0.
  uint64_t seed = 0;
  // The order of an epoch's samples (distill/data/sampler.h), drawn with `seed`; set, it
  // replaces `shuffle`. Default: none (shuffle's order, or index order).
  std::shared_ptr<const Sampler> sampler;
  // Multi-process runs: this loader yields the shard of process `rank` of `num_replicas`, as
  // DistributedSampler(num_replicas, rank) gives it — the epoch's order padded by repeating
  // its start to a multiple of num_replicas (or, with drop_uneven, cut to one), then every
  // num_replicas-th position from `rank`. Every sample lands in exactly one shard per epoch
  // (padding aside). Default: one process.
  int64_t num_replicas = 1;
  int64_t rank = 0;
  // DistributedSampler's drop_last: drop the tail that does not divide evenly among the
  // replicas instead of padding. Default: pad.
  bool drop_uneven = false;
  // Worker threads that assemble the next batches ahead of a BatchStream (>= 0); 0 assembles
  // each batch when it is asked for, in the caller's thread. Default: 0.
  int num_workers = 0;
  // Batches each worker may have ready ahead of the one the caller takes (PyTorch's
  // prefetch_factor; >= 1). Default: 2.
  int prefetch_factor = 2;
  // Evaluation's sharding: every sample in exactly one shard, nothing repeated or dropped, so
  // the shards' metric sums add up to the whole set's (shard sizes differ by at most one;
  // drop_uneven is ignored). Default: DistributedSampler's (above).
  bool exact_shards = false;
};

// Batches of a dataset for one epoch at a time; see the top of this file. Copyable (copies
// share the dataset). GetBatch is const and safe to call from several threads at once;
// SetEpoch is not (call it between epochs).
class DataLoader {
 public:
  // A loader over `dataset` at epoch 0; InvalidArgument for a null dataset or batch_size < 1.
  static absl::StatusOr<DataLoader> Create(std::shared_ptr<const Dataset> dataset,
                                           DataLoaderOptions options);

  // Sets the epoch whose order (and transform seeds) the batches follow.
  void SetEpoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  // Batches in an epoch: ceil(N / batch_size), or floor with drop_last (N: this shard's
  // samples).
  int64_t num_batches() const;

  // The dataset indices of batch i (int64, batch_size of them but maybe fewer in the last).
  at::Tensor BatchIndices(int64_t i) const;
  // Batch i of the current epoch (Dataset::Get of BatchIndices(i), seeded with
  // TransformSeed(seed, epoch, i)).
  Batch GetBatch(int64_t i) const;

  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return options_; }

  // The batches of the current epoch in order: `for (kd::Batch batch : loader)`. Each is
  // assembled when dereferenced.
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = Batch;

    Iterator() = default;
    Batch operator*() const { return loader_->GetBatch(index_); }
    Iterator& operator++() {
      ++index_;
      return *this;
    }
    Iterator operator++(int) {
      Iterator before = *this;
      ++index_;
      return before;
    }
    // The batch index it points at.
    int64_t index() const { return index_; }
    friend bool operator==(const Iterator& a, const Iterator& b) { return a.index_ == b.index_; }

   private:
    friend class DataLoader;
    Iterator(const DataLoader* loader, int64_t index) : loader_(loader), index_(index) {}
    const DataLoader* loader_ = nullptr;
    int64_t index_ = 0;
  };
  Iterator begin() const { return Iterator(this, 0); }
  Iterator end() const { return Iterator(this, num_batches()); }

 private:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  int64_t epoch_ = 0;
  at::Tensor order_;  // int64 (N): the dataset indices in this epoch's order
};

// The batches of one epoch of a loader, in order, assembled ahead by the loader's num_workers
// threads (none: each when Next asks for it). The stream keeps a copy of the loader as it was
// when the stream was made (its epoch included). Not copyable or movable; one consumer thread.
//
//   kd::BatchStream batches(loader);  // loader.SetEpoch(epoch) first
//   while (!batches.done()) { kd::Batch batch = batches.Next(); ... }
class BatchStream {
 public:
  // Batches [first, loader.num_batches()) of the loader's current epoch.
  explicit BatchStream(const DataLoader& loader, int64_t first = 0);
  // Stops the workers (a batch being assembled is finished first) and joins them.
  ~BatchStream();
  BatchStream(const BatchStream&) = delete;
  BatchStream& operator=(const BatchStream&) = delete;

  // Whether every batch has been taken.
  bool done() const { return next_ >= end_; }
  // The index of the batch Next gives.
  int64_t index() const { return next_; }
  // The next batch; throws what assembling it threw (c10::Error), in the caller's thread.
  // Calling it when done() is a programming error (c10::Error).
  Batch Next();

 private:
  struct Shared;
  void Work(int worker);

  const DataLoader loader_;
  int64_t next_;
  const int64_t end_;
  std::unique_ptr<Shared> shared_;  // the workers' queue; null without workers
};

}  // namespace kd

#endif  // LIBKD_DISTILL_DATA_DATA_LOADER_H_
