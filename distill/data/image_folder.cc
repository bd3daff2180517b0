// "image_folder": torchvision's ImageFolder (a folder per class under `root`, as ImageNet's train
// and val folders are laid out) with the transforms torchdistill's ImageNet samples use, applied
// as torchvision's tensor path applies them: RandomResizedCrop(size, scale, ratio) or
// Resize(shorter side) + CenterCrop(size), RandomHorizontalFlip(0.5), then ToTensor and
// Normalize(mean, std). Images are decoded when a batch asks for them (kd::DecodeImageRgb, in
// the loader's worker threads), never all held in memory.
//
// The listing is torchvision's make_dataset: classes the sorted names of root's folders (links
// followed), class i the i-th; each class folder walked (links followed) in sorted order, its
// files with torchvision's extensions (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp, any
// case) in sorted order. A class folder with none is an error naming it, as torchvision's;
// files of the formats libkd does not decode (all but JPEG and PNG) fail when read, naming them.
//
// Random draws follow torchvision's (RandomResizedCrop.get_params: up to ten tries of a scale
// uniform in `scale` and a log-uniform ratio, then the central fallback; the flip a uniform
// draw < 0.5) on the batch's generator, sample by sample. Resizing is bilinear with antialias
// (torch's _upsample_bilinear2d_aa, torchvision's tensor path) on the uint8 image as float,
// rounded back to uint8, as torchvision's F.resize on a uint8 tensor.
#include "distill/data/image_folder.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/kwargs.h"
#include "base/registry.h"
#include "distill/data/dataset.h"
#include "distill/data/image_codec.h"
#include "distill/data/internal/image_dataset.h"

namespace kd {
namespace {

namespace fs = std::filesystem;

constexpr const char* kExtensions[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                       ".pgm", ".tif",  ".tiff", ".webp"};

bool HasImageExtension(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const char* ext : kExtensions) {
    if (absl::EndsWith(lower, ext)) return true;
  }
  return false;
}

// The files under `dir` in os.walk(dir, followlinks=True)'s order, sorted as torchvision sorts the
// walk: by folder path, then file name.
void Walk(const fs::path& dir, std::vector<std::pair<std::string, std::vector<std::string>>>* out,
          int depth) {
  std::error_code error;
  std::vector<std::string> files, folders;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    std::error_code is_error;
    if (it->is_directory(is_error)) {
      folders.push_back(it->path().filename().string());
    } else {
      files.push_back(it->path().filename().string());
    }
  }
  out->emplace_back(dir.string(), std::move(files));
  if (depth >= 64) return;  // a link cycle: os.walk would not end either
  for (const std::string& folder : folders) Walk(dir / folder, out, depth + 1);
}

class ImageFolder final : public Dataset {
 public:
  ImageFolder(ImageFolderListing listing, ImageFolderTransforms transforms)
      : listing_(std::move(listing)), transforms_(std::move(transforms)) {
    std::vector<int64_t> targets;
    for (const auto& [path, target] : listing_.samples) targets.push_back(target);
    targets_ = at::tensor(targets, at::kLong);
  }

  int64_t size() const override { return static_cast<int64_t>(listing_.samples.size()); }
  int64_t num_classes() const override { return static_cast<int64_t>(listing_.classes.size()); }
  absl::StatusOr<at::Tensor> ListTargets() const override { return targets_; }
  // For the exact teacher cache: the flip alone is reported (2 ways); random resized crops are
  // not (they almost never repeat, so a cache of them would not hit): 0.
  int64_t NumTransforms() const override {
    if (transforms_.random_resized_crop > 0) return 0;
    return transforms_.horizontal_flip ? 2 : 1;
  }

 protected:
  Samples GetSamples(const at::Tensor& indices, at::Generator& generator) const override {
    const auto* index = indices.data_ptr<int64_t>();
    std::vector<at::Tensor> images;
    std::vector<int64_t> flips;
    for (int64_t i = 0; i < indices.size(0); ++i) {
      const std::string& path = listing_.samples[index[i]].first;
      absl::StatusOr<at::Tensor> rgb = ReadImageRgb(path);
      // c10::ValueError: bad input data, which a box's Run reports as InvalidArgument.
      TORCH_CHECK_VALUE(rgb.ok(), "image_folder sample ", index[i], ": ", rgb.status().message());
      bool flipped = false;
      images.push_back(TransformImage(rgb->permute({2, 0, 1}), transforms_, generator, &flipped));
      flips.push_back(flipped ? 1 : 0);
    }
    for (const at::Tensor& image : images) {
      TORCH_CHECK(image.sizes() == images[0].sizes(), "image_folder: the batch's images are ",
                  images[0].sizes(), " and ", image.sizes(),
                  ": give random_resized_crop or center_crop so that they match");
    }
    Samples out{at::stack(images), targets_.index_select(0, indices)};
    if (NumTransforms() == 2) out.supp.insert(kTransformKey, at::tensor(flips, at::kLong));
    return out;
  }

 private:
  ImageFolderListing listing_;
  ImageFolderTransforms transforms_;
  at::Tensor targets_;
};

// [lo, hi) uniform double from `generator`, as torch.empty(1).uniform_(lo, hi).item().
double Uniform(double lo, double hi, at::Generator& generator) {
  return at::empty({1}, at::kFloat).uniform_(lo, hi, generator).item<double>();
}

absl::StatusOr<std::shared_ptr<Dataset>> MakeImageFolder(const Kwargs& kwargs) {
  ImageFolderTransforms transforms;
  transforms.random_resized_crop = IntKwarg(kwargs, "random_resized_crop");
  transforms.resize = IntKwarg(kwargs, "resize");
  transforms.center_crop = IntKwarg(kwargs, "center_crop");
  transforms.horizontal_flip = BoolKwarg(kwargs, "horizontal_flip");
  const std::vector<double> scale = NumberListKwarg(kwargs, "scale");
  const std::vector<double> ratio = NumberListKwarg(kwargs, "ratio");
  transforms.mean = NumberListKwarg(kwargs, "mean");
  transforms.std = NumberListKwarg(kwargs, "std");
  if (scale.size() != 2 || ratio.size() != 2 || scale[0] > scale[1] || ratio[0] > ratio[1] ||
      ratio[0] <= 0) {
    return absl::InvalidArgumentError(
        "image_folder: scale and ratio are [low, high] each (ratio > 0), as torchvision's");
  }
  transforms.scale = {scale[0], scale[1]};
  transforms.ratio = {ratio[0], ratio[1]};
  if (absl::Status normalize = CheckRgbNormalize("image_folder", transforms.mean, transforms.std);
      !normalize.ok()) {
    return normalize;
  }
  if (transforms.random_resized_crop > 0 && (transforms.resize > 0 || transforms.center_crop > 0)) {
    return absl::InvalidArgumentError(
        "image_folder: random_resized_crop (training) or resize + center_crop (evaluation), not "
        "both");
  }
  absl::StatusOr<ImageFolderListing> listing = ListImageFolder(StringKwarg(kwargs, "root"));
  if (!listing.ok()) return listing.status();
  return std::make_shared<ImageFolder>(*std::move(listing), std::move(transforms));
}

// Its kwargs: the folder, the transforms, then Normalize's (mean and std per channel).
std::vector<KwargSpec> ImageFolderSpecs() {
  std::vector<KwargSpec> specs = {
      {.name = "root",
       .type = KwargType::kString,
       .doc = "the folder holding a folder per class (ImageNet's train/ or val/)",
       .required = true},
      {.name = "random_resized_crop",
       .type = KwargType::kInteger,
       .doc = "RandomResizedCrop's size (0: none)",
       .default_value = 0,
       .min = 0},
      {.name = "scale",
       .type = KwargType::kNumberList,
       .doc = "RandomResizedCrop's range of the crop's area",
       .default_value = std::vector<double>{0.08, 1.0},
       .min = 0,
       .max = 1},
      {.name = "ratio",
       .type = KwargType::kNumberList,
       .doc = "RandomResizedCrop's range of aspect ratios",
       .default_value = std::vector<double>{3.0 / 4.0, 4.0 / 3.0},
       .min = 0},
      {.name = "resize",
       .type = KwargType::kInteger,
       .doc = "Resize's shorter side (0: none)",
       .default_value = 0,
       .min = 0},
      {.name = "center_crop",
       .type = KwargType::kInteger,
       .doc = "CenterCrop's size (0: none)",
       .default_value = 0,
       .min = 0},
      {.name = "horizontal_flip",
       .type = KwargType::kBool,
       .doc = "RandomHorizontalFlip(0.5)",
       .default_value = false}};
  for (KwargSpec& spec : RgbNormalizeSpecs()) specs.push_back(std::move(spec));
  return specs;
}

KD_REGISTER(DatasetRegistry(), "image_folder", MakeImageFolder, ImageFolderSpecs());

}  // namespace

absl::StatusOr<ImageFolderListing> ListImageFolder(const std::string& root) {
  std::error_code error;
  if (!fs::is_directory(root, error)) {
    return absl::NotFoundError(absl::StrCat("image_folder: ", root, " is not a folder"));
  }
  ImageFolderListing listing;
  for (fs::directory_iterator it(root, error), end; !error && it != end; it.increment(error)) {
    std::error_code is_error;
    if (it->is_directory(is_error)) listing.classes.push_back(it->path().filename().string());
  }
  if (error) {
    return absl::NotFoundError(absl::StrCat("image_folder: ", root, ": ", error.message()));
  }
  std::sort(listing.classes.begin(), listing.classes.end());
  if (listing.classes.empty()) {
    return absl::NotFoundError(absl::StrCat("image_folder: couldn't find any class folder in ",
                                            root, " (a folder per class, as torchvision's)"));
  }
  std::vector<std::string> empty;
  for (size_t c = 0; c < listing.classes.size(); ++c) {
    std::vector<std::pair<std::string, std::vector<std::string>>> walk;
    Walk(fs::path(root) / listing.classes[c], &walk, 0);
    std::sort(walk.begin(), walk.end());
    const size_t before = listing.samples.size();
    for (auto& [dir, files] : walk) {
      std::sort(files.begin(), files.end());
      for (const std::string& file : files) {
        const std::string path = (fs::path(dir) / file).string();
        if (HasImageExtension(path)) listing.samples.emplace_back(path, static_cast<int64_t>(c));
      }
    }
    if (listing.samples.size() == before) empty.push_back(listing.classes[c]);
  }
  if (!empty.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "image_folder: found no image file for the classes ", absl::StrJoin(empty, ", "), " in ",
        root, " (the extensions: .jpg, .jpeg, .png, .ppm, .bmp, .pgm, .tif, .tiff, .webp)"));
  }
  return listing;
}

std::array<int64_t, 4> RandomResizedCropParams(int64_t height, int64_t width,
                                               std::array<double, 2> scale,
                                               std::array<double, 2> ratio,
                                               at::Generator& generator) {
  const double area = static_cast<double>(height * width);
  // torch.log(torch.tensor(ratio)): float32 logs, by torch's own kernel.
  const at::Tensor log_ratio = at::tensor({ratio[0], ratio[1]}, at::kDouble).to(at::kFloat).log();
  const double log_lo = log_ratio[0].item<double>(), log_hi = log_ratio[1].item<double>();
  // Python's round(): half to even, as nearbyint in the default rounding mode.
  auto round = [](double v) { return static_cast<int64_t>(std::nearbyint(v)); };
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * Uniform(scale[0], scale[1], generator);
    const double aspect =
        at::empty({1}, at::kFloat).uniform_(log_lo, log_hi, generator).exp().item<double>();
    const int64_t w = round(std::sqrt(target_area * aspect));
    const int64_t h = round(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int64_t i = at::randint(0, height - h + 1, {1}, generator, at::kLong).item<int64_t>();
      const int64_t j = at::randint(0, width - w + 1, {1}, generator, at::kLong).item<int64_t>();
      return {i, j, h, w};
    }
  }
  // The central fallback.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < std::min(ratio[0], ratio[1])) {
    h = round(static_cast<double>(w) / std::min(ratio[0], ratio[1]));
  } else if (in_ratio > std::max(ratio[0], ratio[1])) {
    w = round(static_cast<double>(h) * std::max(ratio[0], ratio[1]));
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

at::Tensor ResizeUint8(const at::Tensor& image, int64_t height, int64_t width) {
  at::Tensor x = image.unsqueeze(0).to(at::kFloat);
  x = at::_upsample_bilinear2d_aa(x, {height, width}, /*align_corners=*/false);
  return x.round_().clamp_(0, 255).to(at::kByte).squeeze(0);
}

at::Tensor TransformImage(const at::Tensor& chw, const ImageFolderTransforms& t,
                          at::Generator& generator, bool* flipped) {
  at::Tensor image = chw;
  const int64_t height = image.size(1), width = image.size(2);
  if (t.random_resized_crop > 0) {
    const auto [i, j, h, w] = RandomResizedCropParams(height, width, t.scale, t.ratio, generator);
    image = ResizeUint8(image.slice(1, i, i + h).slice(2, j, j + w), t.random_resized_crop,
                        t.random_resized_crop);
  }
  if (t.resize > 0) {
    // torchvision's Resize(int): the shorter side to `resize`, the longer in proportion
    // (int(size * long / short), truncated).
    const int64_t h = image.size(1), w = image.size(2);
    if (h <= w) {
      image = ResizeUint8(image, t.resize, static_cast<int64_t>(t.resize * w / h));
    } else {
      image = ResizeUint8(image, static_cast<int64_t>(t.resize * h / w), t.resize);
    }
  }
  if (t.center_crop > 0) {
    const int64_t h = image.size(1), w = image.size(2), s = t.center_crop;
    TORCH_CHECK(h >= s && w >= s, "center_crop ", s, " of an image of ", h, " x ", w,
                ": resize it first (torchvision pads; libkd does not)");
    // torchvision: top = int(round((h - s) / 2.0)), left likewise.
    const int64_t top = static_cast<int64_t>(std::nearbyint((h - s) / 2.0));
    const int64_t left = static_cast<int64_t>(std::nearbyint((w - s) / 2.0));
    image = image.slice(1, top, top + s).slice(2, left, left + s);
  }
  const bool flip = t.horizontal_flip && at::rand({1}, generator).item<double>() < 0.5;
  if (flip) image = image.flip({2});
  if (flipped != nullptr) *flipped = flip;
  at::Tensor out = image.to(at::kFloat).div_(255);
  const at::Tensor mean = at::tensor(t.mean, at::kDouble).to(at::kFloat).view({3, 1, 1});
  const at::Tensor std = at::tensor(t.std, at::kDouble).to(at::kFloat).view({3, 1, 1});
  return out.sub_(mean).div_(std);
}

}  // namespace kd
