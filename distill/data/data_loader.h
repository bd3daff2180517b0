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
// Why no worker threads (LoaderConfig.num_workers is not used): a batch of 128 Fashion-MNIST
// images costs 0.08 ms to assemble, 0.16-0.24 ms with random crop and flip (medians of
// data_loader_benchmark, -c opt, one intra-op thread, a shared 2-vCPU machine), against
// milliseconds for a training step of even a small CNN on it: a prefetch thread could hide a
// few percent of a step at most. It would compete for the two cores with libtorch's intra-op
// threads instead, and that competition is costly here: with two OpenMP threads on the busy
// machine the same plain batch took 5 ms. On a GPU, kernels run asynchronously, so the CPU
// assembles the next batch while the device computes anyway.
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
#include "distill/procs/proc_func.h"

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

}  // namespace kd

#endif  // LIBKD_DISTILL_DATA_DATA_LOADER_H_
