// torchvision's ImageFolder as the dataset "image_folder" (image_folder.cc says what it reads and
// how it transforms); its listing and transforms, for tests and tools.
//
//   KD_ASSIGN_OR_RETURN(kd::ImageFolderListing listing, kd::ListImageFolder("/data/val"));
//   at::Tensor x = kd::TransformImage(rgb_chw_uint8, {.resize = 256, .center_crop = 224}, gen);
#ifndef LIBKD_DISTILL_DATA_IMAGE_FOLDER_H_
#define LIBKD_DISTILL_DATA_IMAGE_FOLDER_H_

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"

namespace kd {

// torchvision's find_classes and make_dataset of a root: the class names (sorted), and each
// image file's path with its class index, in torchvision's order.
struct ImageFolderListing {
  std::vector<std::string> classes;
  std::vector<std::pair<std::string, int64_t>> samples;
};

// NotFound naming the root where it is no folder, holds no class folder, or a class folder holds
// no file with an image extension (naming those classes).
absl::StatusOr<ImageFolderListing> ListImageFolder(const std::string& root);

// The transforms of one image, torchvision's in this order; 0 / false: left out.
struct ImageFolderTransforms {
  int64_t random_resized_crop = 0;  // its size
  std::array<double, 2> scale = {0.08, 1.0};
  std::array<double, 2> ratio = {3.0 / 4.0, 4.0 / 3.0};
  int64_t resize = 0;       // the shorter side
  int64_t center_crop = 0;  // its size
  bool horizontal_flip = false;
  std::vector<double> mean = {0.0, 0.0, 0.0}, std = {1.0, 1.0, 1.0};
};

// torchvision's RandomResizedCrop.get_params on a height x width image: {top, left, h, w}, drawn
// from `generator` as torchvision draws from torch's (ten tries, then the central fallback).
std::array<int64_t, 4> RandomResizedCropParams(int64_t height, int64_t width,
                                               std::array<double, 2> scale,
                                               std::array<double, 2> ratio,
                                               at::Generator& generator);

// uint8 (C, H, W) resized to height x width as torchvision's F.resize on a uint8 tensor
// (bilinear, antialias, rounded back).
at::Tensor ResizeUint8(const at::Tensor& image, int64_t height, int64_t width);

// uint8 RGB (3, H, W) through `transforms` (random draws from `generator`), then ToTensor and
// Normalize: float (3, H', W'). `flipped` (if given) says whether the flip was drawn.
at::Tensor TransformImage(const at::Tensor& chw, const ImageFolderTransforms& transforms,
                          at::Generator& generator, bool* flipped = nullptr);

}  // namespace kd

#endif  // LIBKD_DISTILL_DATA_IMAGE_FOLDER_H_
