// torchdistill's dataset wrappers (torchdistill/datasets/wrapper.py), registered on
// DatasetWrapperRegistry(): SSKDDatasetWrapper, CRDDatasetWrapper.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/kwargs.h"
#include "base/registry.h"
#include "distill/data/dataset.h"

namespace kd {
namespace {

// A dataset over another's samples: its size, classes and targets.
class Wrapper : public Dataset {
 public:
  explicit Wrapper(std::shared_ptr<const Dataset> dataset) : dataset_(std::move(dataset)) {}

  int64_t size() const override { return dataset_->size(); }
  int64_t num_classes() const override { return dataset_->num_classes(); }
  absl::StatusOr<at::Tensor> ListTargets() const override { return dataset_->ListTargets(); }

 protected:
  std::shared_ptr<const Dataset> dataset_;
};

// torchdistill's SSKDDatasetWrapper: the sample and its three rotations, stacked.
class SskdViews final : public Wrapper {
 public:
  using Wrapper::Wrapper;

 protected:
  Samples GetSamples(const at::Tensor& indices, at::Generator& generator) const override {
    Batch batch = dataset_->Get(indices, generator);
    const at::Tensor x = batch.samples.toTensor();
    TORCH_CHECK(x.dim() == 4 && x.size(2) == x.size(3),
                "SSKDDatasetWrapper rotates square images (B, C, H, H); the dataset gives ",
                x.sizes());
    const at::Tensor views = at::stack(
        {x, at::rot90(x, 1, {2, 3}), at::rot90(x, 2, {2, 3}), at::rot90(x, 3, {2, 3})}, 1);
    return {views, batch.targets.toTensor(), AddedSupp(batch)};
  }
};

KD_REGISTER(DatasetWrapperRegistry(), "SSKDDatasetWrapper",
            ([](std::shared_ptr<const Dataset> dataset,
                const Kwargs&) -> absl::StatusOr<std::shared_ptr<Dataset>> {
              return std::make_shared<SskdViews>(std::move(dataset));
            }),
            {});

// torchdistill's CRDDatasetWrapper: each sample's positive and negatives for CRD, by class.
class CrdContrast final : public Wrapper {
 public:
  CrdContrast(std::shared_ptr<const Dataset> dataset, std::vector<std::vector<int64_t>> positives,
              std::vector<std::vector<int64_t>> negatives, int64_t num_negative_samples, bool exact)
      : Wrapper(std::move(dataset)),
        positives_(std::move(positives)),
        negatives_(std::move(negatives)),
        k_(num_negative_samples),
        exact_(exact) {}

 protected:
  Samples GetSamples(const at::Tensor& indices, at::Generator& generator) const override {
    Batch batch = dataset_->Get(indices, generator);
    const at::Tensor targets = batch.targets.toTensor();
    const int64_t b = indices.size(0);
    at::Tensor pos = at::empty({b}, at::kLong);
    at::Tensor contrast = at::empty({b, 1 + k_}, at::kLong);
    auto pos_a = pos.accessor<int64_t, 1>();
    auto contrast_a = contrast.accessor<int64_t, 2>();
    const at::Tensor labels = targets.to(at::kLong).contiguous();
    const at::Tensor index = indices.contiguous();
    const int64_t* label = labels.data_ptr<int64_t>();
    const int64_t* sample = index.data_ptr<int64_t>();
    for (int64_t i = 0; i < b; ++i) {
      const std::vector<int64_t>& same = positives_[label[i]];
      pos_a[i] = exact_ ? sample[i] : same[Below(same.size(), generator)];
      contrast_a[i][0] = pos_a[i];
      const std::vector<int64_t> drawn = Draw(negatives_[label[i]], generator);
      for (int64_t j = 0; j < k_; ++j) contrast_a[i][1 + j] = drawn[j];
    }
    c10::Dict<std::string, at::Tensor> supp = AddedSupp(batch);
    supp.insert_or_assign("pos_idx", pos);
    supp.insert_or_assign("contrast_idx", contrast);
    return {batch.samples.toTensor(), targets, std::move(supp)};
  }

 private:
  // A uniform integer in [0, n) from `generator`.
  static int64_t Below(size_t n, at::Generator& generator) {
    return at::randint(static_cast<int64_t>(n), {1}, generator, at::kLong).item<int64_t>();
  }

  // k_ of `pool`, without replacement when the pool has that many (Floyd's algorithm: a
  // uniform k-subset in O(k)), else with (numpy's choice with replace=True).
  std::vector<int64_t> Draw(const std::vector<int64_t>& pool, at::Generator& generator) const {
    const int64_t n = static_cast<int64_t>(pool.size());
    std::vector<int64_t> out;
    out.reserve(k_);
    if (k_ > n) {
      const at::Tensor picks = at::randint(n, {k_}, generator, at::kLong);
      const int64_t* pick = picks.data_ptr<int64_t>();
      for (int64_t j = 0; j < k_; ++j) out.push_back(pool[pick[j]]);
      return out;
    }
    const at::Tensor draws = at::rand({k_}, generator, at::kDouble);
    const double* u = draws.data_ptr<double>();
    absl::flat_hash_set<int64_t> chosen;
    for (int64_t j = n - k_, d = 0; j < n; ++j, ++d) {
      const int64_t t = std::min(j, static_cast<int64_t>(u[d] * static_cast<double>(j + 1)));
      const int64_t pick = chosen.insert(t).second ? t : (chosen.insert(j), j);
      out.push_back(pool[pick]);
    }
    return out;
  }

  std::vector<std::vector<int64_t>> positives_;  // by class: the samples of the class
  std::vector<std::vector<int64_t>> negatives_;  // by class: the samples of the others
  int64_t k_;
  bool exact_;
};

absl::StatusOr<std::shared_ptr<Dataset>> MakeCrdContrast(std::shared_ptr<const Dataset> dataset,
                                                         const Kwargs& kwargs) {
  absl::StatusOr<at::Tensor> targets = dataset->ListTargets();
  if (!targets.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("CRDDatasetWrapper draws negatives by class and needs the dataset's targets: ",
                     targets.status().message()));
  }
  const int64_t classes = dataset->num_classes();
  std::vector<std::vector<int64_t>> positives(classes), negatives(classes);
  const at::Tensor labels = targets->to(at::kLong).contiguous();
  const int64_t* label = labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < labels.numel(); ++i) positives[label[i]].push_back(i);
  for (int64_t c = 0; c < classes; ++c) {
    for (int64_t other = 0; other < classes; ++other) {
      if (other != c) {
        negatives[c].insert(negatives[c].end(), positives[other].begin(), positives[other].end());
      }
    }
  }
  const double ratio = NumberKwarg(kwargs, "ratio");
  if (ratio > 0 && ratio < 1) {
    // torchdistill keeps the first int(len * ratio) of a permutation of each class's negatives.
    at::Generator generator =
        at::detail::createCPUGenerator(static_cast<uint64_t>(IntKwarg(kwargs, "seed")));
    for (std::vector<int64_t>& pool : negatives) {
      const int64_t keep = static_cast<int64_t>(static_cast<double>(negatives[0].size()) * ratio);
      const at::Tensor order =
          at::randperm(static_cast<int64_t>(pool.size()), generator, at::kLong);
      const int64_t* perm = order.data_ptr<int64_t>();
      std::vector<int64_t> kept;
      for (int64_t j = 0; j < keep && j < order.size(0); ++j) kept.push_back(pool[perm[j]]);
      pool = std::move(kept);
    }
  }
  for (int64_t c = 0; c < classes; ++c) {
    if (negatives[c].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CRDDatasetWrapper: class ", c, " has no negatives (every sample is of one class)"));
    }
  }
  return std::make_shared<CrdContrast>(
      std::move(dataset), std::move(positives), std::move(negatives),
      IntKwarg(kwargs, "num_negative_samples"), StringKwarg(kwargs, "mode") == "exact");
}

KD_REGISTER(DatasetWrapperRegistry(), "CRDDatasetWrapper", MakeCrdContrast,
            {{.name = "num_negative_samples",
              .type = KwargType::kInteger,
              .doc = "negatives per sample (CRDLoss's num_negative_samples)",
              .min = 1,
              .required = true},
             {.name = "mode",
              .type = KwargType::kString,
              .doc = "the positive: the sample itself (exact) or one of its class (relax)",
              .default_value = std::string("exact"),
              .choices = {"exact", "relax"}},
             {.name = "ratio",
              .type = KwargType::kNumber,
              .doc = "in (0, 1): keep that share of each class's negatives; else all",
              .default_value = 1.0,
              .min = 0},
             {.name = "seed",
              .type = KwargType::kInteger,
              .doc = "the draw of the kept negatives (with ratio)",
              .default_value = int64_t{0}}});

}  // namespace
}  // namespace kd
