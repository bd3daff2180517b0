#include "distill/data/dataset.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Dict.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "distill/config/kwargs.h"
#include "distill/config/plugin_kinds.h"

namespace kd {

Batch Dataset::Get(const at::Tensor& indices, at::Generator generator) const {
  TORCH_CHECK(indices.defined() && indices.dim() == 1 && indices.scalar_type() == at::kLong &&
                  indices.device().is_cpu(),
              "Dataset::Get: indices must be a 1-D int64 CPU tensor; got ",
              indices.defined() ? ShapeString(indices) : std::string("an undefined tensor"),
              indices.defined()
                  ? absl::StrCat(" ", std::string(c10::toString(indices.scalar_type())))
                  : "");
  if (indices.numel() > 0) {
    const int64_t low = indices.min().item<int64_t>();
    const int64_t high = indices.max().item<int64_t>();
    TORCH_CHECK(low >= 0 && high < size(), "Dataset::Get: indices must be in [0, ", size(),
                "); got values from ", low, " to ", high);
  }
  Samples got = GetSamples(indices, generator);
  c10::Dict<std::string, at::Tensor> supp;
  supp.insert("indices", indices);
  for (const auto& entry : got.supp) supp.insert_or_assign(entry.key(), entry.value());
  return Batch{std::move(got.samples), std::move(got.targets), std::move(supp)};
}

c10::Dict<std::string, at::Tensor> AddedSupp(const Batch& batch) {
  c10::Dict<std::string, at::Tensor> added;
  if (!batch.supp.isGenericDict()) return added;
  for (const auto& entry : batch.supp.toGenericDict()) {
    if (entry.key().toStringRef() != "indices" && entry.value().isTensor()) {
      added.insert(entry.key().toStringRef(), entry.value().toTensor());
    }
  }
  return added;
}

absl::StatusOr<at::Tensor> Dataset::ListTargets() const {
  return absl::UnimplementedError(
      "this dataset does not list its targets without loading its samples (Dataset::ListTargets)");
}

Batch Dataset::Get(const at::Tensor& indices, uint64_t seed) const {
  return Get(indices, at::detail::createCPUGenerator(seed));
}

uint64_t TransformSeed(uint64_t seed, int64_t epoch, int64_t batch_index) {
  // splitmix64's finalizer over the three words, one after another.
  auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  uint64_t h = mix(seed);
  h = mix(h ^ static_cast<uint64_t>(epoch));
  return mix(h ^ static_cast<uint64_t>(batch_index));
}

Registry<DatasetFactory>& DatasetRegistry() {
  static Registry<DatasetFactory>* const registry =
      NewGlobalRegistry<DatasetFactory>(std::string(kDatasetKind));
  return *registry;
}

absl::StatusOr<std::shared_ptr<Dataset>> MakeDataset(absl::string_view key, const Kwargs& kwargs) {
  Registry<DatasetFactory>& registry = DatasetRegistry();
  KD_ASSIGN_OR_RETURN(const DatasetFactory* factory, registry.Get(key));
  const std::string owner = absl::StrCat(kDatasetKind, " \"", key, "\"");
  KD_ASSIGN_OR_RETURN(const Kwargs resolved, ResolvePluginKwargs(registry, key, kwargs, owner));
  return (*factory)(resolved);
}

namespace {

class Subset final : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> dataset, int64_t start, int64_t stop)
      : dataset_(std::move(dataset)), start_(start), stop_(stop) {}

  int64_t size() const override { return stop_ - start_; }
  int64_t num_classes() const override { return dataset_->num_classes(); }
  int64_t NumTransforms() const override { return dataset_->NumTransforms(); }
  absl::StatusOr<at::Tensor> ListTargets() const override {
    KD_ASSIGN_OR_RETURN(at::Tensor all, dataset_->ListTargets());
    return all.slice(0, start_, stop_);
  }

 protected:
  Samples GetSamples(const at::Tensor& indices, at::Generator& generator) const override {
    Batch batch = dataset_->Get(indices + start_, generator);
    return {batch.samples.toTensor(), batch.targets.toTensor(), AddedSupp(batch)};
  }

 private:
  std::shared_ptr<const Dataset> dataset_;
  int64_t start_, stop_;
};

// The samples `indices` (int64) of a dataset, in that order.
class IndexedSubset final : public Dataset {
 public:
  IndexedSubset(std::shared_ptr<const Dataset> dataset, at::Tensor indices)
      : dataset_(std::move(dataset)), indices_(std::move(indices)) {}

  int64_t size() const override { return indices_.size(0); }
  int64_t num_classes() const override { return dataset_->num_classes(); }
  int64_t NumTransforms() const override { return dataset_->NumTransforms(); }
  absl::StatusOr<at::Tensor> ListTargets() const override {
    KD_ASSIGN_OR_RETURN(at::Tensor all, dataset_->ListTargets());
    return all.index_select(0, indices_);
  }

 protected:
  Samples GetSamples(const at::Tensor& indices, at::Generator& generator) const override {
    Batch batch = dataset_->Get(indices_.index_select(0, indices), generator);
    return {batch.samples.toTensor(), batch.targets.toTensor(), AddedSupp(batch)};
  }

 private:
  std::shared_ptr<const Dataset> dataset_;
  at::Tensor indices_;
};

}  // namespace

Registry<DatasetWrapperFactory>& DatasetWrapperRegistry() {
  static Registry<DatasetWrapperFactory>* const registry =
      NewGlobalRegistry<DatasetWrapperFactory>(std::string(kDatasetWrapperKind));
  return *registry;
}

absl::StatusOr<std::shared_ptr<Dataset>> WrapDataset(absl::string_view key,
                                                     std::shared_ptr<const Dataset> dataset,
                                                     const Kwargs& kwargs) {
  Registry<DatasetWrapperFactory>& registry = DatasetWrapperRegistry();
  KD_ASSIGN_OR_RETURN(const DatasetWrapperFactory* factory, registry.Get(key));
  const std::string owner = absl::StrCat(kDatasetWrapperKind, " \"", key, "\"");
  KD_ASSIGN_OR_RETURN(const Kwargs resolved, ResolvePluginKwargs(registry, key, kwargs, owner));
  return (*factory)(std::move(dataset), resolved);
}

absl::StatusOr<std::shared_ptr<Dataset>> SubsetOf(std::shared_ptr<const Dataset> dataset,
                                                  int64_t start, int64_t stop) {
  const int64_t size = dataset->size();
  if (stop == 0) stop = size;
  if (start < 0 || start >= stop || stop > size) {
    return absl::InvalidArgumentError(absl::StrCat("subset [", start, ", ", stop,
                                                   ") does not fit a dataset of ", size,
                                                   " samples: give 0 <= start < stop <= ", size));
  }
  return std::make_shared<Subset>(std::move(dataset), start, stop);
}

absl::StatusOr<std::shared_ptr<Dataset>> RandomSplitOf(std::shared_ptr<const Dataset> dataset,
                                                       const std::vector<double>& lengths,
                                                       int64_t seed, int part, LengthsRule rule) {
  const int64_t size = dataset->size();
  if (lengths.empty() || part < 0 || part >= static_cast<int>(lengths.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("random_split: part ", part, " of ", lengths.size(), " lengths"));
  }
  std::vector<int64_t> counts;
  double sum = 0;
  for (double l : lengths) sum += l;
  if (rule == LengthsRule::kSplitDataset && sum != static_cast<double>(size)) {
    // torchdistill's split_dataset: ratios of the size, truncated; the last part the rest.
    int64_t given = 0;
    for (double l : lengths) {
      if (l < 0 || !(sum > 0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "random_split (split_dataset): lengths must be >= 0 with a positive sum; got ", l));
      }
      counts.push_back(static_cast<int64_t>((l / sum) * static_cast<double>(size)));
      given += counts.back();
    }
    if (counts.size() > 1 && given != size) counts.back() = size - (given - counts.back());
  } else if (std::abs(sum - 1.0) <= 1e-9 && sum <= 1.0 + 1e-9) {
    // torch.utils.data.random_split's rules: fractions summing to 1, else counts.
    int64_t given = 0;
    for (double l : lengths) {
      if (l < 0 || l > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("random_split: a fraction must be in [0, 1], got ", l));
      }
      counts.push_back(static_cast<int64_t>(std::floor(size * l)));
      given += counts.back();
    }
    for (int64_t i = 0; i < size - given; ++i) ++counts[i % counts.size()];
  } else {
    int64_t total = 0;
    for (double l : lengths) {
      if (l < 0 || l != std::floor(l)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "random_split: lengths are sample counts or fractions summing to 1; got ", l));
      }
      counts.push_back(static_cast<int64_t>(l));
      total += counts.back();
    }
    if (total != size) {
      return absl::InvalidArgumentError(absl::StrCat("random_split: the lengths sum to ", total,
                                                     ", not the dataset's ", size, " samples"));
    }
  }
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const at::Tensor order = at::randperm(size, generator, at::TensorOptions().dtype(at::kLong));
  int64_t offset = 0;
  for (int i = 0; i < part; ++i) offset += counts[i];
  return std::make_shared<IndexedSubset>(std::move(dataset),
                                         order.slice(0, offset, offset + counts[part]).clone());
}

}  // namespace kd
