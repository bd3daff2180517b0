// torch.utils.data's samplers under their class names: SequentialSampler, RandomSampler,
// SubsetRandomSampler, WeightedRandomSampler and DistributedSampler, each drawing what Python's
// draws from a generator seeded with seed + epoch (see distill/data/sampler.h).
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/ivalue_util.h"
#include "base/kwargs.h"
#include "base/registry.h"
#include "distill/data/sampler.h"

namespace kd {
namespace {

at::Generator EpochGenerator(uint64_t seed, int64_t epoch) {
  return at::detail::createCPUGenerator(seed + static_cast<uint64_t>(epoch));
}

class SequentialSampler final : public Sampler {
 public:
  at::Tensor Order(int64_t n, uint64_t, int64_t) const override { return at::arange(n, at::kLong); }
};

// RandomSampler(data_source, replacement, num_samples, generator).
class RandomSampler final : public Sampler {
 public:
  RandomSampler(bool replacement, std::optional<int64_t> num_samples)
      : replacement_(replacement), num_samples_(num_samples) {}

  at::Tensor Order(int64_t n, uint64_t seed, int64_t epoch) const override {
    const int64_t count = num_samples_.value_or(n);
    if (n == 0 || count == 0) return at::empty({0}, at::kLong);
    at::Generator generator = EpochGenerator(seed, epoch);
    std::vector<at::Tensor> parts;
    if (replacement_) {  // Python draws 32 at a time, then the rest
      for (int64_t i = 0; i < count / 32; ++i) {
        parts.push_back(at::randint(n, {32}, generator, at::kLong));
      }
      parts.push_back(at::randint(n, {count % 32}, generator, at::kLong));
    } else {  // whole permutations, then the start of one more
      for (int64_t i = 0; i < count / n; ++i) {
        parts.push_back(at::randperm(n, generator, at::kLong));
      }
      parts.push_back(at::randperm(n, generator, at::kLong).slice(/*dim=*/0, 0, count % n));
    }
    return at::cat(parts);
  }

 private:
  bool replacement_;
  std::optional<int64_t> num_samples_;  // unset: the dataset's size
};

// SubsetRandomSampler(indices, generator).
class SubsetRandomSampler final : public Sampler {
 public:
  explicit SubsetRandomSampler(at::Tensor indices) : indices_(std::move(indices)) {}

  at::Tensor Order(int64_t, uint64_t seed, int64_t epoch) const override {
    at::Generator generator = EpochGenerator(seed, epoch);
    return indices_.index_select(0, at::randperm(indices_.size(0), generator, at::kLong));
  }

  absl::Status CheckDatasetSize(int64_t n) const override {
    if (indices_.numel() == 0) return absl::OkStatus();
    const int64_t low = indices_.min().item<int64_t>(), high = indices_.max().item<int64_t>();
    if (low >= 0 && high < n) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("sampler \"SubsetRandomSampler\": indices must be in [0, ", n,
                     ") for this dataset of ", n, " samples; got ", low < 0 ? low : high));
  }

 private:
  at::Tensor indices_;  // int64
};

// WeightedRandomSampler(weights, num_samples, replacement, generator).
class WeightedRandomSampler final : public Sampler {
 public:
  WeightedRandomSampler(at::Tensor weights, int64_t num_samples, bool replacement)
      : weights_(std::move(weights)), num_samples_(num_samples), replacement_(replacement) {}

  at::Tensor Order(int64_t, uint64_t seed, int64_t epoch) const override {
    at::Generator generator = EpochGenerator(seed, epoch);
    return at::multinomial(weights_, num_samples_, replacement_, generator);
  }

  absl::Status CheckDatasetSize(int64_t n) const override {
    if (weights_.size(0) <= n) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("sampler \"WeightedRandomSampler\": ", weights_.size(0),
                     " weights for a dataset of ", n, " samples; give at most one per sample"));
  }

 private:
  at::Tensor weights_;  // double
  int64_t num_samples_;
  bool replacement_;
};

// DistributedSampler(dataset, shuffle, seed, drop_last): the order before sharding.
class DistributedSampler final : public Sampler {
 public:
  DistributedSampler(bool shuffle, std::optional<int64_t> seed, bool drop_last)
      : shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {}

  at::Tensor Order(int64_t n, uint64_t seed, int64_t epoch) const override {
    if (!shuffle_) return at::arange(n, at::kLong);
    at::Generator generator =
        EpochGenerator(seed_.has_value() ? static_cast<uint64_t>(*seed_) : seed, epoch);
    return at::randperm(n, generator, at::kLong);
  }
  bool drops_uneven_tail() const override { return drop_last_; }

 private:
  bool shuffle_;
  std::optional<int64_t> seed_;  // unset: the run's
  bool drop_last_;
};

// An integer kwarg without a default (its absence means "the dataset's" or "the run's").
std::optional<int64_t> OptionalInt(const Kwargs& kwargs, absl::string_view name) {
  const c10::IValue* v = FindKwarg(kwargs, name);
  return v == nullptr ? std::nullopt : std::optional<int64_t>(v->toInt());
}

absl::StatusOr<std::shared_ptr<const Sampler>> MakeSequential(const Kwargs&) {
  return std::make_shared<SequentialSampler>();
}

absl::StatusOr<std::shared_ptr<const Sampler>> MakeRandom(const Kwargs& kwargs) {
  return std::make_shared<RandomSampler>(BoolKwarg(kwargs, "replacement"),
                                         OptionalInt(kwargs, "num_samples"));
}

absl::StatusOr<std::shared_ptr<const Sampler>> MakeSubsetRandom(const Kwargs& kwargs) {
  const std::vector<int64_t> indices = IntListKwarg(kwargs, "indices");
  return std::make_shared<SubsetRandomSampler>(
      at::tensor(indices, at::kLong).reshape({static_cast<int64_t>(indices.size())}));
}

absl::StatusOr<std::shared_ptr<const Sampler>> MakeWeightedRandom(const Kwargs& kwargs) {
  const std::vector<double> weights = NumberListKwarg(kwargs, "weights");
  return std::make_shared<WeightedRandomSampler>(at::tensor(weights, at::kDouble),
                                                 IntKwarg(kwargs, "num_samples"),
                                                 BoolKwarg(kwargs, "replacement"));
}

absl::StatusOr<std::shared_ptr<const Sampler>> MakeDistributed(const Kwargs& kwargs) {
  return std::make_shared<DistributedSampler>(
      BoolKwarg(kwargs, "shuffle"), OptionalInt(kwargs, "seed"), BoolKwarg(kwargs, "drop_last"));
}

// WeightedRandomSampler's weights must leave something to draw: a positive sum, and without
// replacement at least num_samples positive weights (torch.multinomial's rule).
absl::Status CheckWeights(const KwargsView& view) {
  const std::vector<double> weights = NumberListKwarg(view.kwargs, "weights");
  const int64_t num_samples = IntKwarg(view.kwargs, "num_samples");
  int64_t positive = 0;
  for (double w : weights) positive += w > 0 ? 1 : 0;
  if (positive == 0) {
    return absl::InvalidArgumentError("\"weights\" must hold at least one positive weight");
  }
  const bool replacement = BoolKwarg(view.kwargs, "replacement");
  if (!replacement && num_samples > positive) {
    return absl::InvalidArgumentError(
        absl::StrCat("without replacement, \"num_samples\" (", num_samples,
                     ") cannot exceed the number of positive weights (", positive, ")"));
  }
  return absl::OkStatus();
}

KD_REGISTER(SamplerRegistry(), "SequentialSampler", MakeSequential, {});
KD_REGISTER(SamplerRegistry(), "RandomSampler", MakeRandom,
            {{.name = "replacement",
              .type = KwargType::kBool,
              .doc = "draw with replacement",
              .default_value = false},
             {.name = "num_samples",
              .type = KwargType::kInteger,
              .doc = "samples an epoch draws; the dataset's size",
              .min = 1}});
KD_REGISTER(SamplerRegistry(), "SubsetRandomSampler", MakeSubsetRandom,
            {{.name = "indices",
              .type = KwargType::kIntegerList,
              .doc = "the dataset indices to shuffle, each epoch anew",
              .min = 0,
              .required = true}});
KD_REGISTER(SamplerRegistry(), "WeightedRandomSampler", MakeWeightedRandom,
            {{.name = "weights",
              .type = KwargType::kNumberList,
              .doc = "a weight per sample (index 0, 1, ...), not necessarily summing to 1",
              .min = 0,
              .required = true},
             {.name = "num_samples",
              .type = KwargType::kInteger,
              .doc = "samples an epoch draws",
              .min = 1,
              .required = true},
             {.name = "replacement",
              .type = KwargType::kBool,
              .doc = "draw with replacement",
              .default_value = true}},
            CheckWeights);
KD_REGISTER(SamplerRegistry(), "DistributedSampler", MakeDistributed,
            {{.name = "shuffle",
              .type = KwargType::kBool,
              .doc = "a new random order every epoch",
              .default_value = true},
             {.name = "seed",
              .type = KwargType::kInteger,
              .doc = "seed of the order (seed + epoch); the run's seed (Python's default: 0)"},
             {.name = "drop_last",
              .type = KwargType::kBool,
              .doc = "drop the tail that does not divide among the processes instead of "
                     "padding",
              .default_value = false}});

}  // namespace
}  // namespace kd
