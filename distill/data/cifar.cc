// "cifar10" and "cifar100": CIFAR-10/100 (Krizhevsky 2009) from the binary distribution
// (cifar-10-binary.tar.gz, cifar-100-binary.tar.gz: the folder cifar-10-batches-bin /
// cifar-100-binary under `root`; torchvision's Python-pickle copy converts with
// tools/cifar_to_binary.py), with torchvision's RandomCrop(32, padding), RandomHorizontalFlip(0.5),
// ToTensor and Normalize(mean, std) per channel, in that order, applied to whole batches.
//
// A record is a label byte (CIFAR-100: the coarse label, then the fine one, which is the class,
// as torchvision's CIFAR100 takes it) and 3072 pixel bytes, the red, green and blue 32x32 planes.
// All images stay in memory as one uint8 tensor (50000 x 3 x 32 x 32: 154 MB).
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/kwargs.h"
#include "base/registry.h"
#include "base/status_macros.h"
#include "distill/data/dataset.h"
#include "distill/data/internal/image_dataset.h"

namespace kd {
namespace {

constexpr int64_t kPixels = 3 * 32 * 32;

struct CifarFormat {
  const char* key;
  const char* folder;   // under root
  const char* tarball;  // the binary version's download
  std::vector<std::string> train_files, test_files;
  int64_t label_bytes;  // the class is the last of them
  int64_t num_classes;
};

const CifarFormat& Cifar10() {
  static const CifarFormat* const format =
      new CifarFormat{"cifar10",
                      "cifar-10-batches-bin",
                      "cifar-10-binary.tar.gz",
                      {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                       "data_batch_4.bin", "data_batch_5.bin"},
                      {"test_batch.bin"},
                      1,
                      10};
  return *format;
}
const CifarFormat& Cifar100() {
  static const CifarFormat* const format = new CifarFormat{
      "cifar100", "cifar-100-binary", "cifar-100-binary.tar.gz", {"train.bin"}, {"test.bin"}, 2,
      100};
  return *format;
}

constexpr int64_t kMaxCifarFileBytes = int64_t{256} << 20;

// The split's records, read from its files under root/<folder> (or root itself).
absl::StatusOr<std::pair<at::Tensor, at::Tensor>> ReadRecords(
    const CifarFormat& format, const std::string& root, const std::vector<std::string>& files) {
  // error_code forms: a symbolic-link loop or a name too long under root is an error of
  // ReadFile's below, not an uncaught std::filesystem_error.
  std::error_code error;
  std::filesystem::path dir = std::filesystem::path(root) / format.folder;
  if (!std::filesystem::exists(dir / files[0], error) &&
      std::filesystem::exists(std::filesystem::path(root) / files[0], error)) {
    dir = root;
  }
  const int64_t record = format.label_bytes + kPixels;
  std::vector<std::string> chunks;  // each file's records, copied once into the tensor
  int64_t size = 0;
  for (const std::string& name : files) {
    const std::string path = (dir / name).string();
    // The largest file of either version is CIFAR-100's train.bin (154 MB).
    absl::StatusOr<std::string> data = ReadFile(path, kMaxCifarFileBytes);
    if (absl::IsNotFound(data.status())) {
      return absl::NotFoundError(absl::StrCat(
          format.key, ": no file ", path, "; extract the binary version (", format.tarball,
          ", https://www.cs.toronto.edu/~kriz/cifar.html) under the kwarg \"root\", or convert "
          "torchvision's download with tools/cifar_to_binary.py"));
    }
    KD_RETURN_IF_ERROR(data.status());
    if (data->empty() || data->size() % record != 0) {
      return absl::DataLossError(absl::StrCat(format.key, ": ", path, ": ", data->size(),
                                              " bytes, not a whole number of ", record,
                                              "-byte records"));
    }
    size += static_cast<int64_t>(data->size());
    chunks.push_back(*std::move(data));
  }
  const int64_t n = size / record;
  at::Tensor all = at::empty({n, record}, at::kByte);
  uint8_t* to = all.data_ptr<uint8_t>();
  for (const std::string& chunk : chunks) {
    std::memcpy(to, chunk.data(), chunk.size());
    to += chunk.size();
  }
  at::Tensor labels = all.select(1, format.label_bytes - 1).to(at::kLong);
  at::Tensor images = all.slice(1, format.label_bytes).reshape({n, 3, 32, 32}).contiguous();
  return std::make_pair(std::move(images), std::move(labels));
}

absl::StatusOr<std::shared_ptr<Dataset>> MakeCifar(const CifarFormat& format,
                                                   const Kwargs& kwargs) {
  ImageAugmentation options = {.random_crop_padding = IntKwarg(kwargs, "random_crop_padding"),
                               .horizontal_flip = BoolKwarg(kwargs, "horizontal_flip"),
                               .mean = NumberListKwarg(kwargs, "mean"),
                               .std = NumberListKwarg(kwargs, "std")};
  KD_RETURN_IF_ERROR(CheckRgbNormalize(format.key, options.mean, options.std));
  const bool test = StringKwarg(kwargs, "split") == "test";
  KD_ASSIGN_OR_RETURN(auto records, ReadRecords(format, StringKwarg(kwargs, "root"),
                                                test ? format.test_files : format.train_files));
  if (const int64_t top = records.second.max().item<int64_t>(); top >= format.num_classes) {
    return absl::DataLossError(absl::StrCat(format.key, ": a record's label is ", top,
                                            "; the classes are 0 to ", format.num_classes - 1));
  }
  return std::make_shared<ImageDataset>(std::move(records.first), std::move(records.second),
                                        format.num_classes, std::move(options));
}

std::vector<KwargSpec> CifarSpecs(int64_t train, int64_t test) {
  std::vector<KwargSpec> specs = {
      {.name = "root",
       .type = KwargType::kString,
       .doc = "folder holding the binary version's folder (cifar-10-batches-bin / "
              "cifar-100-binary) or its files",
       .required = true},
      {.name = "split",
       .type = KwargType::kString,
       .doc = absl::StrCat("train (", train, " images) or test (", test, ")"),
       .default_value = "train",
       .choices = {"train", "test"}}};
  for (KwargSpec& spec : RgbNormalizeSpecs()) specs.push_back(std::move(spec));
  for (KwargSpec& spec : CropAndFlipSpecs(32)) specs.push_back(std::move(spec));
  return specs;
}

KD_REGISTER(
    DatasetRegistry(), "cifar10", [](const Kwargs& kwargs) { return MakeCifar(Cifar10(), kwargs); },
    CifarSpecs(50000, 10000));
KD_REGISTER(
    DatasetRegistry(), "cifar100",
    [](const Kwargs& kwargs) { return MakeCifar(Cifar100(), kwargs); }, CifarSpecs(50000, 10000));

}  // namespace
}  // namespace kd
