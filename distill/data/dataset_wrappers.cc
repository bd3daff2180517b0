// torchdistill's dataset wrappers (torchdistill/datasets/wrapper.py), registered on
// DatasetWrapperRegistry(): SSKDDatasetWrapper.
#include <memory>
#include <utility>

#include <ATen/ATen.h>

#include "base/registry.h"
#include "distill/data/dataset.h"

namespace kd {
namespace {

// torchdistill's SSKDDatasetWrapper: the sample and its three rotations, stacked.
class SskdViews final : public Dataset {
 public:
  explicit SskdViews(std::shared_ptr<const Dataset> dataset) : dataset_(std::move(dataset)) {}

  int64_t size() const override { return dataset_->size(); }
  int64_t num_classes() const override { return dataset_->num_classes(); }

 protected:
  Samples GetSamples(const at::Tensor& indices, at::Generator& generator) const override {
    Batch batch = dataset_->Get(indices, generator);
    const at::Tensor x = batch.samples.toTensor();
    TORCH_CHECK(x.dim() == 4 && x.size(2) == x.size(3),
                "SSKDDatasetWrapper rotates square images (B, C, H, H); the dataset gives ",
                x.sizes());
    const at::Tensor views = at::stack(
        {x, at::rot90(x, 1, {2, 3}), at::rot90(x, 2, {2, 3}), at::rot90(x, 3, {2, 3})}, 1);
    return {views, batch.targets.toTensor()};
  }

 private:
  std::shared_ptr<const Dataset> dataset_;
};

KD_REGISTER(DatasetWrapperRegistry(), "SSKDDatasetWrapper",
            ([](std::shared_ptr<const Dataset> dataset,
                const Kwargs&) -> absl::StatusOr<std::shared_ptr<Dataset>> {
              return std::make_shared<SskdViews>(std::move(dataset));
            }),
            {});

}  // namespace
}  // namespace kd
