#include "distill/data/image_transforms.h"

#include <algorithm>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>

#include "base/ivalue_util.h"

namespace kd {
namespace {

void CheckPerImage(const at::Tensor& images, const at::Tensor& values, const char* name) {
  TORCH_CHECK(values.dim() == 1 && values.size(0) == images.size(0), "CropAndFlip: ", name,
              " must have one value per image (", images.size(0), "); got ", ShapeString(values));
}

// out = CropAndFlip(in) for contiguous (B, C, H, W) `in` and `out`, row by row.
template <typename T>
void CropAndFlipRows(const T* in, T* out, int64_t b, int64_t c, int64_t h, int64_t w,
                     int64_t padding, const int64_t* top, const int64_t* left, const bool* flip) {
  for (int64_t n = 0; n < b; ++n) {
    TORCH_CHECK(top[n] >= 0 && top[n] <= 2 * padding && left[n] >= 0 && left[n] <= 2 * padding,
                "CropAndFlip: image ", n, " has corner (", top[n], ", ", left[n],
                "); top and left must be in [0, ", 2 * padding, "]");
    const int64_t dy = top[n] - padding;  // output row i reads input row i + dy
    const int64_t dx = left[n] - padding;
    // Output columns [j0, j1) read input columns j0 + dx .. j1 + dx - 1; the rest are padding.
    const int64_t j0 = std::clamp<int64_t>(-dx, 0, w);
    const int64_t j1 = std::clamp<int64_t>(w - dx, j0, w);
    for (int64_t k = 0; k < c; ++k) {
      const T* src = in + (n * c + k) * h * w;
      T* dst = out + (n * c + k) * h * w;
      for (int64_t i = 0; i < h; ++i, dst += w) {
        const int64_t r = i + dy;
        if (r < 0 || r >= h) {
          std::fill(dst, dst + w, T(0));
          continue;
        }
        std::fill(dst, dst + j0, T(0));
        if (j1 > j0) std::copy(src + r * w + j0 + dx, src + r * w + j1 + dx, dst + j0);
        std::fill(dst + j1, dst + w, T(0));
        if (flip[n]) std::reverse(dst, dst + w);
      }
    }
  }
}

}  // namespace

at::Tensor CropAndFlip(const at::Tensor& images, int64_t padding, const at::Tensor& top,
                       const at::Tensor& left, const at::Tensor& flip) {
  TORCH_CHECK(images.dim() == 4 && images.device().is_cpu(),
              "CropAndFlip: images must be (B, C, H, W) on the CPU; got ", ShapeString(images),
              " on ", images.device().str());
  TORCH_CHECK(padding >= 0, "CropAndFlip: padding must be >= 0; got ", padding);
  CheckPerImage(images, top, "top");
  CheckPerImage(images, left, "left");
  CheckPerImage(images, flip, "flip");
  const at::Tensor in = images.contiguous();
  at::Tensor out = at::empty_like(in, at::MemoryFormat::Contiguous);
  const at::Tensor tops = top.to(at::kLong).contiguous();
  const at::Tensor lefts = left.to(at::kLong).contiguous();
  const at::Tensor flips = flip.to(at::kBool).contiguous();
  AT_DISPATCH_ALL_TYPES(in.scalar_type(), "CropAndFlip", [&] {
    CropAndFlipRows<scalar_t>(in.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), in.size(0),
                              in.size(1), in.size(2), in.size(3), padding, tops.data_ptr<int64_t>(),
                              lefts.data_ptr<int64_t>(), flips.data_ptr<bool>());
  });
  return out;
}

at::Tensor RandomCropAndFlip(const at::Tensor& images, int64_t padding, double flip_p,
                             at::Generator& generator, at::Tensor* transform) {
  TORCH_CHECK(images.dim() == 4, "RandomCropAndFlip: images must be (B, C, H, W); got ",
              ShapeString(images));
  const int64_t b = images.size(0);
  if (padding == 0 && flip_p <= 0) {
    if (transform != nullptr) *transform = at::zeros({b}, at::kLong);
    return images;
  }
  const at::Tensor top =
      padding > 0 ? at::randint(0, 2 * padding + 1, {b}, generator) : at::zeros({b}, at::kLong);
  const at::Tensor left =
      padding > 0 ? at::randint(0, 2 * padding + 1, {b}, generator) : at::zeros({b}, at::kLong);
  const at::Tensor flip =
      flip_p > 0 ? at::rand({b}, generator).lt(flip_p) : at::zeros({b}, at::kBool);
  if (transform != nullptr) {
    *transform = (top * (2 * padding + 1) + left) * 2 + flip.to(at::kLong);
  }
  return CropAndFlip(images, padding, top, left, flip);
}

int64_t NumCropAndFlipTransforms(int64_t padding, double flip_p) {
  (void)flip_p;  // ids keep a flip bit either way
  return (2 * padding + 1) * (2 * padding + 1) * 2;
}

at::Tensor ScaleAndNormalize(const at::Tensor& images, double mean, double std) {
  TORCH_CHECK(images.scalar_type() == at::kByte, "ScaleAndNormalize: images must be uint8; got ",
              images.scalar_type());
  TORCH_CHECK(std > 0, "ScaleAndNormalize: std must be > 0; got ", std);
  at::Tensor x = images.to(at::kFloat);
  if (mean == 0.0 && std == 1.0) return x.div_(255.0);
  return x.mul_(1.0 / (255.0 * std)).sub_(mean / std);
}

at::Tensor ScaleAndNormalizeChannels(const at::Tensor& images, const std::vector<double>& mean,
                                     const std::vector<double>& std) {
  TORCH_CHECK(images.scalar_type() == at::kByte,
              "ScaleAndNormalizeChannels: images must be uint8; got ", images.scalar_type());
  TORCH_CHECK(images.dim() == 4 && images.size(1) == static_cast<int64_t>(mean.size()) &&
                  mean.size() == std.size(),
              "ScaleAndNormalizeChannels: images (B, C, H, W) with C means and stds");
  const at::Tensor m = at::tensor(mean, at::kDouble).to(at::kFloat).view({1, -1, 1, 1});
  const at::Tensor s = at::tensor(std, at::kDouble).to(at::kFloat).view({1, -1, 1, 1});
  return images.to(at::kFloat).div_(255.0).sub_(m).div_(s);
}

}  // namespace kd
