// Image transforms on whole batches (B, C, H, W): torchvision's RandomCrop with padding and
// RandomHorizontalFlip fused into one pass, ToTensor's scaling and Normalize.
//
//   at::Generator gen = at::detail::createCPUGenerator(kd::TransformSeed(seed, epoch, i));
//   at::Tensor x = kd::RandomCropAndFlip(images_u8, /*padding=*/4, /*flip_p=*/0.5, gen);
//   at::Tensor input = kd::ScaleAndNormalize(x, /*mean=*/0.2860, /*std=*/0.3530);
//
// The random choices for a batch are drawn at once from `generator`: B crop tops, then B crop
// lefts (when padding > 0), then B uniforms for the flips (when flip_p > 0); equal generators
// give equal batches.
//
// Why a loop kernel for crop + flip: composed of tensor ops (constant_pad_nd, a gather at a
// (B, H * W) int64 index, flip, where) the transform took 0.42 ms for 128 Fashion-MNIST images
// (one intra-op thread, -c opt, a shared 2-vCPU machine), five times the rest of the batch
// (index_select, conversion, normalization: 0.08 ms); advanced indexing with broadcast row and
// column indices was slower still. CropAndFlip copies each output row once (the valid span,
// zeros around it, reversed when flipped): 0.09 ms. data_loader_benchmark measures both.
//
// Shapes or crop corners that do not fit throw c10::Error.
#ifndef LIBKD_DISTILL_DATA_IMAGE_TRANSFORMS_H_
#define LIBKD_DISTILL_DATA_IMAGE_TRANSFORMS_H_

#include <cstdint>
#include <vector>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

namespace kd {

// Each image of `images` (B, C, H, W; CPU, any real dtype) zero-padded by `padding` pixels on
// every side, cropped back to H x W with its top-left corner at (top[b], left[b]) of the padded
// image (int64 (B), each in [0, 2 * padding]), then mirrored left to right where flip[b] (bool
// (B)). top = left = padding and no flip give the image unchanged.
at::Tensor CropAndFlip(const at::Tensor& images, int64_t padding, const at::Tensor& top,
                       const at::Tensor& left, const at::Tensor& flip);

// torchvision's RandomCrop(size=(H, W), padding=padding) then RandomHorizontalFlip(flip_p):
// CropAndFlip with corners drawn uniformly from [0, 2 * padding] and each image flipped with
// probability flip_p. padding 0 and flip_p 0: `images` itself, nothing drawn. With `transform`,
// each image's choices are also returned there as one id, int64 (B):
// (top * (2 * padding + 1) + left) * 2 + flip, in [0, NumCropAndFlipTransforms(padding, flip_p))
// (so equal ids are equal crops and flips: what an exact cache of a model's outputs keys on).
at::Tensor RandomCropAndFlip(const at::Tensor& images, int64_t padding, double flip_p,
                             at::Generator& generator, at::Tensor* transform = nullptr);

// How many different ids RandomCropAndFlip's `transform` can take: (2 * padding + 1)^2 * 2.
int64_t NumCropAndFlipTransforms(int64_t padding, double flip_p);

// uint8 images as float32 in [0, 1] (ToTensor), then (x - mean) / std (Normalize).
at::Tensor ScaleAndNormalize(const at::Tensor& images, double mean, double std);

// The same per channel: images (B, C, H, W), `mean` and `std` C values each, computed as
// torchvision's ToTensor and Normalize compute it (x / 255, then (x - mean) / std).
at::Tensor ScaleAndNormalizeChannels(const at::Tensor& images, const std::vector<double>& mean,
                                     const std::vector<double>& std);

}  // namespace kd

#endif  // LIBKD_DISTILL_DATA_IMAGE_TRANSFORMS_H_
