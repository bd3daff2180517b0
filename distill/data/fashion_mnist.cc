// "fashion_mnist": Fashion-MNIST (Xiao et al. 2017) from the gzip IDX files of Debian's
// dataset-fashion-mnist, with torchvision's RandomCrop(28, padding), RandomHorizontalFlip(0.5),
// ToTensor and Normalize(mean, std), in that order, applied to whole batches.
//
// All images stay in memory as one uint8 tensor (60000 x 28 x 28: 47 MB); a batch is an
// index_select of it, converted and augmented at once.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/ivalue_util.h"
#include "base/kwargs.h"
#include "base/registry.h"
#include "base/status_macros.h"
#include "distill/data/dataset.h"
#include "distill/data/idx_file.h"
#include "distill/data/internal/image_dataset.h"

namespace kd {
namespace {

constexpr char kKey[] = "fashion_mnist";
constexpr char kDefaultRoot[] = "/usr/share/datasets/fashion-mnist";
constexpr int64_t kNumClasses = 10;

// The IDX file `name` under `root`: `name` (gzip) or, failing that, `name` without ".gz".
absl::StatusOr<at::Tensor> ReadDatasetFile(const std::string& root, const std::string& name) {
  const std::string path = absl::StrCat(root, "/", name);
  absl::StatusOr<at::Tensor> data = ReadIdxFile(path);
  if (!absl::IsNotFound(data.status())) return data;
  const std::string unpacked = path.substr(0, path.size() - 3);  // an unpacked copy
  absl::StatusOr<at::Tensor> plain = ReadIdxFile(unpacked);
  if (!absl::IsNotFound(plain.status())) return plain;
  return absl::NotFoundError(absl::StrCat(
      kKey, ": no file ", path, "; install Debian's dataset-fashion-mnist (apt-get install ",
      "dataset-fashion-mnist), or set the kwarg \"root\" to a folder holding ", name));
}

absl::StatusOr<std::shared_ptr<Dataset>> MakeFashionMnist(const Kwargs& kwargs) {
  struct {
    std::string root, split;
  } options = {.root = StringKwarg(kwargs, "root"), .split = StringKwarg(kwargs, "split")};
  ImageAugmentation augmentation = {.random_crop_padding = IntKwarg(kwargs, "random_crop_padding"),
                                    .horizontal_flip = BoolKwarg(kwargs, "horizontal_flip"),
                                    .mean = {NumberKwarg(kwargs, "mean")},
                                    .std = {NumberKwarg(kwargs, "std")}};

  const std::string prefix = options.split == "test" ? "t10k" : "train";
  const std::string images_name = prefix + "-images-idx3-ubyte.gz";
  const std::string labels_name = prefix + "-labels-idx1-ubyte.gz";
  KD_ASSIGN_OR_RETURN(at::Tensor images, ReadDatasetFile(options.root, images_name));
  KD_ASSIGN_OR_RETURN(at::Tensor labels, ReadDatasetFile(options.root, labels_name));
  auto corrupt = [&](const std::string& name, const std::string& what) {
    return absl::DataLossError(absl::StrCat(kKey, ": ", options.root, "/", name, ": ", what));
  };
  if (images.dim() != 3 || images.size(0) == 0 || images.size(1) == 0 || images.size(2) == 0) {
    return corrupt(images_name, absl::StrCat("expected images (N, rows, columns) with N, rows, "
                                             "columns >= 1; the file holds ",
                                             ShapeString(images)));
  }
  if (labels.dim() != 1) {
    return corrupt(labels_name,
                   absl::StrCat("expected labels (N); the file holds ", ShapeString(labels)));
  }
  if (labels.size(0) != images.size(0)) {
    return corrupt(labels_name, absl::StrCat("holds ", labels.size(0), " labels but ", images_name,
                                             " holds ", images.size(0), " images"));
  }
  if (const int64_t top = labels.max().item<int64_t>(); top >= kNumClasses) {
    return corrupt(labels_name,
                   absl::StrCat("holds the label ", top, "; Fashion-MNIST's are 0 to 9"));
  }
  return std::make_shared<ImageDataset>(images.unsqueeze(1), labels.to(at::kLong), kNumClasses,
                                        std::move(augmentation));
}

std::vector<KwargSpec> FashionMnistSpecs() {
  std::vector<KwargSpec> specs = {
      {.name = "root",
       .type = KwargType::kString,
       .doc = "folder of the gzip IDX files",
       .default_value = kDefaultRoot},
      {.name = "split",
       .type = KwargType::kString,
       .doc = "train (60000 images) or test (10000)",
       .default_value = "train",
       .choices = {"train", "test"}},
      {.name = "mean",
       .type = KwargType::kNumber,
       .doc = "Normalize's mean, of pixels scaled to [0, 1] (train set's: 0.2860)",
       .default_value = 0.0},
      PositiveNumberSpec("std", "Normalize's std, of pixels scaled to [0, 1] (train set's: 0.3530)",
                         1.0)};
  for (KwargSpec& spec : CropAndFlipSpecs(28)) specs.push_back(std::move(spec));
  return specs;
}

KD_REGISTER(DatasetRegistry(), kKey, MakeFashionMnist, FashionMnistSpecs());

}  // namespace
}  // namespace kd
