#include "distill/data/internal/image_dataset.h"

#include <string>
#include <utility>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "distill/data/image_transforms.h"

namespace kd {

std::vector<KwargSpec> CropAndFlipSpecs(int64_t image_size) {
  return {{.name = "random_crop_padding",
           .type = KwargType::kInteger,
           .doc = absl::StrCat("zero-pad by this many pixels, then crop a random ", image_size, "x",
                               image_size, " (0: off)"),
           .default_value = 0,
           .min = 0,
           .max = image_size},
          {.name = "horizontal_flip",
           .type = KwargType::kBool,
           .doc = "mirror each image left to right with probability 0.5",
           .default_value = false}};
}

std::vector<KwargSpec> RgbNormalizeSpecs() {
  return {{.name = "mean",
           .type = KwargType::kNumberList,
           .doc = "Normalize's mean per channel, of pixels scaled to [0, 1]",
           .default_value = std::vector<double>{0.0, 0.0, 0.0}},
          {.name = "std",
           .type = KwargType::kNumberList,
           .doc = "Normalize's std per channel, of pixels scaled to [0, 1]",
           .default_value = std::vector<double>{1.0, 1.0, 1.0}}};
}

absl::Status CheckRgbNormalize(absl::string_view key, const std::vector<double>& mean,
                               const std::vector<double>& std) {
  for (const auto& [name, v] :
       {std::pair<const char*, const std::vector<double>*>{"mean", &mean}, {"std", &std}}) {
    if (v->size() != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, ": ", name, " takes 3 values (red, green, blue); got ", v->size()));
    }
  }
  for (double s : std) {
    if (s <= 0) return absl::InvalidArgumentError(absl::StrCat(key, ": std must be > 0"));
  }
  return absl::OkStatus();
}

ImageDataset::ImageDataset(at::Tensor images, at::Tensor labels, int64_t num_classes,
                           ImageAugmentation augmentation)
    : images_(std::move(images)),
      labels_(std::move(labels)),
      num_classes_(num_classes),
      augmentation_(std::move(augmentation)) {}

int64_t ImageDataset::size() const { return images_.size(0); }

Dataset::Samples ImageDataset::GetSamples(const at::Tensor& indices,
                                          at::Generator& generator) const {
  at::Tensor x = images_.index_select(0, indices);  // uint8 (B, C, H, W)
  at::Tensor transform;
  x = RandomCropAndFlip(x, augmentation_.random_crop_padding, flip_p(), generator, &transform);
  const at::Tensor scaled =
      augmentation_.mean.size() == 1
          ? ScaleAndNormalize(x, augmentation_.mean[0], augmentation_.std[0])
          : ScaleAndNormalizeChannels(x, augmentation_.mean, augmentation_.std);
  Samples got{scaled, labels_.index_select(0, indices)};
  got.supp.insert(std::string(kTransformKey), transform);
  return got;
}

int64_t ImageDataset::NumTransforms() const {
  return NumCropAndFlipTransforms(augmentation_.random_crop_padding, flip_p());
}

}  // namespace kd
