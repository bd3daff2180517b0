#include "distill/data/data_loader.h"

#include <algorithm>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kd {

absl::StatusOr<DataLoader> DataLoader::Create(std::shared_ptr<const Dataset> dataset,
                                              DataLoaderOptions options) {
  if (dataset == nullptr) return absl::InvalidArgumentError("DataLoader: the dataset is null");
  if (options.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DataLoader: batch_size must be >= 1; got ", options.batch_size));
  }
  if (options.num_replicas < 1 || options.rank < 0 || options.rank >= options.num_replicas) {
    return absl::InvalidArgumentError(
        absl::StrCat("DataLoader: rank ", options.rank,
                     " is not in [0, num_replicas=", options.num_replicas, ")"));
  }
  return DataLoader(std::move(dataset), options);
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  SetEpoch(0);
}

void DataLoader::SetEpoch(int64_t epoch) {
  epoch_ = epoch;
  const int64_t n = dataset_->size();
  at::Tensor order;
  if (!options_.shuffle) {
    if (order_.defined() && options_.num_replicas == 1) return;  // the same every epoch
    order = at::arange(n, at::kLong);
  } else {
    // torch.utils.data.DistributedSampler: g.manual_seed(seed + epoch); randperm(n, generator=g).
    at::Generator generator =
        at::detail::createCPUGenerator(options_.seed + static_cast<uint64_t>(epoch));
    order = at::randperm(n, generator, at::kLong);
  }
  const int64_t replicas = options_.num_replicas;
  if (replicas > 1 && options_.exact_shards) {
    order = order.slice(/*dim=*/0, options_.rank, n, replicas).contiguous();
  } else if (replicas > 1 && n > 0) {
    // DistributedSampler's shard: pad (repeating the order) or cut to a multiple of the
    // replicas, then every replicas-th position from the rank.
    const int64_t per_rank = options_.drop_uneven && n % replicas != 0
                                 ? (n - replicas + replicas - 1) / replicas
                                 : (n + replicas - 1) / replicas;
    const int64_t total = per_rank * replicas;
    if (total > n) {
      order = order.repeat({(total + n - 1) / n}).slice(/*dim=*/0, 0, total);
    } else {
      order = order.slice(/*dim=*/0, 0, total);
    }
    order = order.slice(/*dim=*/0, options_.rank, total, replicas).contiguous();
  }
  order_ = order;
}

int64_t DataLoader::num_batches() const {
  const int64_t n = order_.size(0);
  const int64_t b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

at::Tensor DataLoader::BatchIndices(int64_t i) const {
  TORCH_CHECK(i >= 0 && i < num_batches(), "DataLoader: batch ", i, " is out of range [0, ",
              num_batches(), ")");
  const int64_t start = i * options_.batch_size;
  const int64_t stop = std::min(start + options_.batch_size, order_.size(0));
  return order_.slice(/*dim=*/0, start, stop);
}

Batch DataLoader::GetBatch(int64_t i) const {
  return dataset_->Get(BatchIndices(i), TransformSeed(options_.seed, epoch_, i));
}

}  // namespace kd
