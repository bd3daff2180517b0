// What libkd's image datasets share (fashion_mnist, cifar10, cifar100): uint8 images held in
// memory, and torchvision's RandomCrop(size, padding), RandomHorizontalFlip(0.5), ToTensor and
// Normalize(mean, std) applied to whole batches, each sample's crop and flip reported as its
// transform (Dataset::kTransformKey) for the exact teacher cache.
#ifndef LIBKD_DISTILL_DATA_INTERNAL_IMAGE_DATASET_H_
#define LIBKD_DISTILL_DATA_INTERNAL_IMAGE_DATASET_H_

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/kwargs.h"
#include "distill/data/dataset.h"

namespace kd {

struct ImageAugmentation {
  int64_t random_crop_padding = 0;  // 0: no crop
  bool horizontal_flip = false;
  // Normalize's, one value per channel. One channel: (x * (1 / (255 * std)) - mean / std), as
  // libkd's fashion_mnist has always computed it; more: torchvision's (x / 255 - mean) / std.
  std::vector<double> mean = {0.0}, std = {1.0};
};

// The kwarg specs of the crop and flip: random_crop_padding (at most `image_size`) and
// horizontal_flip.
std::vector<KwargSpec> CropAndFlipSpecs(int64_t image_size);

// The kwarg specs of Normalize on RGB images: mean and std per channel (defaults 0 and 1).
std::vector<KwargSpec> RgbNormalizeSpecs();
// OK if `mean` and `std` have 3 values each and every std is > 0; else InvalidArgument
// "<key>: ...".
absl::Status CheckRgbNormalize(absl::string_view key, const std::vector<double>& mean,
                               const std::vector<double>& std);

class ImageDataset : public Dataset {
 public:
  // images: uint8 (N, C, H, W); labels: int64 (N).
  ImageDataset(at::Tensor images, at::Tensor labels, int64_t num_classes,
               ImageAugmentation augmentation);

  int64_t size() const override;
  int64_t num_classes() const override { return num_classes_; }
  absl::StatusOr<at::Tensor> ListTargets() const override { return labels_; }

 protected:
  Samples GetSamples(const at::Tensor& indices, at::Generator& generator) const override;
  int64_t NumTransforms() const override;

 private:
  double flip_p() const { return augmentation_.horizontal_flip ? 0.5 : 0.0; }

  at::Tensor images_;
  at::Tensor labels_;
  int64_t num_classes_;
  ImageAugmentation augmentation_;
};

}  // namespace kd

#endif  // LIBKD_DISTILL_DATA_INTERNAL_IMAGE_DATASET_H_
