// Samplers: the order in which an epoch visits a dataset, chosen in a config by
// torch.utils.data's class names (LoaderConfig.sampler, as torchdistill's loader configs name
// them: `sampler { key: "RandomSampler" }`).
//
//   KD_ASSIGN_OR_RETURN(std::shared_ptr<const kd::Sampler> sampler,
//                       kd::MakeSampler("WeightedRandomSampler",
//                                       {{"weights", c10::List<double>({0.1, 0.9})},
//                                        {"num_samples", int64_t{8}}}));
//   at::Tensor order = sampler->Order(/*dataset_size=*/2, /*seed=*/1, /*epoch=*/0);
//
// An order is a function of (kwargs, dataset size, seed, epoch) alone: a random sampler draws
// from a CPU generator seeded with seed + epoch, the seed DistributedSampler uses, so a run
// reproduces its batches and resumes at any batch. Each equals Python's sampler given
// `generator=torch.Generator().manual_seed(seed + epoch)` (tested against values recorded from
// Python): RandomSampler, SequentialSampler, SubsetRandomSampler, WeightedRandomSampler, and
// DistributedSampler's order before it is sharded. In a multi-process run the loader shards
// whichever order the sampler gives as DistributedSampler shards its own (distill/data/
// data_loader.h); DistributedSampler's num_replicas and rank come from the run, not kwargs.
//
// Errors: MakeSampler returns NotFound for an unknown key (the nearest and every key named)
// and InvalidArgument for kwargs that break the sampler's contract; CheckDatasetSize says
// when a sampler's kwargs do not fit the dataset (indices out of range, a weight per sample
// missing).
#ifndef LIBKD_DISTILL_DATA_SAMPLER_H_
#define LIBKD_DISTILL_DATA_SAMPLER_H_

#include <cstdint>
#include <functional>
#include <memory>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/ivalue_util.h"
#include "base/registry.h"

namespace kd {

// The order of one epoch's samples.
class Sampler {
 public:
  virtual ~Sampler() = default;

  // The dataset indices epoch `epoch` visits, in order: 1-D int64, each in [0, dataset_size);
  // its length may differ from dataset_size (num_samples, a subset, replacement).
  virtual at::Tensor Order(int64_t dataset_size, uint64_t seed, int64_t epoch) const = 0;

  // OK when the sampler can serve a dataset of `dataset_size` samples; InvalidArgument saying
  // why not otherwise.
  virtual absl::Status CheckDatasetSize(int64_t dataset_size) const {
    (void)dataset_size;
    return absl::OkStatus();
  }

  // DistributedSampler's drop_last: a multi-process run drops the tail of the order that does
  // not divide evenly among the processes instead of padding it. False for the others.
  virtual bool drops_uneven_tail() const { return false; }
};

// Builds a sampler from its kwargs (checked against the registration's contract already).
using SamplerFactory =
    std::function<absl::StatusOr<std::shared_ptr<const Sampler>>(const Kwargs& kwargs)>;

// The samplers by config key (registry kind "sampler", LoaderConfig.sampler.key).
Registry<SamplerFactory>& SamplerRegistry();

// The sampler registered as `key` built with `kwargs`: NotFound for an unknown key (naming the
// nearest and listing all), InvalidArgument for kwargs that break its contract.
absl::StatusOr<std::shared_ptr<const Sampler>> MakeSampler(absl::string_view key,
                                                           const Kwargs& kwargs);

}  // namespace kd

#endif  // LIBKD_DISTILL_DATA_SAMPLER_H_
