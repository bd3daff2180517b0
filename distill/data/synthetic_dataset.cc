// "synthetic": a deterministic, learnable dataset for tests and smoke runs. Class k has a fixed
// random prototype image (standard normal pixels); sample i is the prototype of class
// i % num_classes plus Gaussian noise of std `noise`. Everything is drawn once, from `seed`,
// when the dataset is built, so equal kwargs give equal datasets in every process, and a small
// model separates the classes within a few steps.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/ivalue_util.h"
#include "base/kwargs.h"
#include "base/registry.h"
#include "distill/data/dataset.h"

namespace kd {
namespace {

// Memory the samples may take: 2^28 floats (1 GiB).
constexpr int64_t kMaxElements = int64_t{1} << 28;

class SyntheticDataset final : public Dataset {
 public:
  SyntheticDataset(at::Tensor samples, at::Tensor targets, int64_t num_classes)
      : samples_(std::move(samples)), targets_(std::move(targets)), num_classes_(num_classes) {}

  int64_t size() const override { return samples_.size(0); }
  int64_t num_classes() const override { return num_classes_; }
  absl::StatusOr<at::Tensor> ListTargets() const override { return targets_; }
  int64_t NumTransforms() const override { return 1; }  // no random transforms

 protected:
  Samples GetSamples(const at::Tensor& indices, at::Generator&) const override {
    return {samples_.index_select(0, indices), targets_.index_select(0, indices)};
  }

 private:
  at::Tensor samples_;  // float (N, C, H, W)
  at::Tensor targets_;  // int64 (N)
  int64_t num_classes_;
};

absl::StatusOr<std::shared_ptr<Dataset>> MakeSynthetic(const Kwargs& kwargs) {
  const int64_t n = IntKwarg(kwargs, "num_samples");
  const int64_t k = IntKwarg(kwargs, "num_classes");
  const int64_t c = IntKwarg(kwargs, "channels");
  const int64_t h = IntKwarg(kwargs, "height");
  const int64_t w = IntKwarg(kwargs, "width");
  const double noise = NumberKwarg(kwargs, "noise");
  at::Generator generator =
      at::detail::createCPUGenerator(static_cast<uint64_t>(IntKwarg(kwargs, "seed")));
  const at::Tensor prototypes = at::randn({k, c, h, w}, generator);
  at::Tensor targets = at::arange(n, at::kLong).remainder_(k);
  at::Tensor samples = prototypes.index_select(0, targets);
  if (noise > 0) samples.add_(at::randn({n, c, h, w}, generator), noise);
  return std::make_shared<SyntheticDataset>(std::move(samples), std::move(targets), k);
}

absl::Status CheckSyntheticSize(const KwargsView& view) {
  // The samples and the prototypes: max(num_samples, num_classes) images of C x H x W. Each
  // factor is at most 2^24 (the contract) and the product stops growing once over the limit,
  // so it cannot overflow.
  int64_t elements =
      std::max(IntKwarg(view.kwargs, "num_samples"), IntKwarg(view.kwargs, "num_classes"));
  for (const char* name : {"channels", "height", "width"}) {
    if (elements > kMaxElements) break;
    elements *= IntKwarg(view.kwargs, name);
  }
  if (elements > kMaxElements) {
    return absl::InvalidArgumentError(
        "max(num_samples, num_classes) * channels * height * width must be at most 2^28 (1 GiB "
        "of floats); make the dataset smaller");
  }
  return absl::OkStatus();
}

KD_REGISTER(DatasetRegistry(), "synthetic", MakeSynthetic,
            {{.name = "num_samples",
              .type = KwargType::kInteger,
              .doc = "number of samples",
              .default_value = 512,
              .min = 1,
              .max = 1 << 24},
             {.name = "num_classes",
              .type = KwargType::kInteger,
              .doc = "number of classes (sample i is of class i % num_classes)",
              .default_value = 10,
              .min = 1,
              .max = 1 << 16},
             {.name = "channels",
              .type = KwargType::kInteger,
              .doc = "image channels",
              .default_value = 1,
              .min = 1,
              .max = 1 << 10},
             {.name = "height",
              .type = KwargType::kInteger,
              .doc = "image rows",
              .default_value = 28,
              .min = 1,
              .max = 1 << 14},
             {.name = "width",
              .type = KwargType::kInteger,
              .doc = "image columns",
              .default_value = 28,
              .min = 1,
              .max = 1 << 14},
             NonNegativeNumberSpec(
                 "noise", "std of the Gaussian noise added to the unit-variance prototypes", 0.5),
             {.name = "seed",
              .type = KwargType::kInteger,
              .doc = "seed of the prototypes and the noise",
              .default_value = 0,
              .min = 0}},
            CheckSyntheticSize);

}  // namespace
}  // namespace kd
