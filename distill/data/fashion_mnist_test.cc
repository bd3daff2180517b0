// "fashion_mnist" on small IDX files written here, and on the real data set when Debian's
// dataset-fashion-mnist is installed (those cases skip otherwise).
#include <sys/stat.h>
#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "distill/data/dataset.h"
#include "distill/data/image_transforms.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace {

using test::IValueNear;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kRealRoot[] = "/usr/share/datasets/fashion-mnist";

bool Exists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0;
}

// Writes an IDX file of uint8 `data` with `dims`, gzip-compressed, to `path`.
void WriteIdxGz(const std::string& path, const std::vector<uint32_t>& dims,
                const at::Tensor& data) {
  std::vector<uint8_t> bytes = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    bytes.insert(bytes.end(), {static_cast<uint8_t>(d >> 24), static_cast<uint8_t>(d >> 16),
                               static_cast<uint8_t>(d >> 8), static_cast<uint8_t>(d)});
  }
  const at::Tensor flat = data.contiguous().to(at::kByte);
  bytes.insert(bytes.end(), flat.data_ptr<uint8_t>(), flat.data_ptr<uint8_t>() + flat.numel());
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  ASSERT_EQ(gzwrite(file, bytes.data(), bytes.size()), static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(file), Z_OK);
}

// A folder holding a 4-image "train" split: image k is all pixels 10 * (k + 1) but pixel
// (0, 0), which is 255; labels 9, 0, 3, 3.
std::string WriteTinySplit(const std::string& name, const at::Tensor& labels) {
  const std::string root = ::testing::TempDir() + "/" + name;
  mkdir(root.c_str(), 0755);
  at::Tensor images = (at::arange(1, 5, at::kByte) * 10).view({4, 1, 1}).expand({4, 28, 28});
  images = images.clone();
  images.select(1, 0).select(1, 0).fill_(255);
  WriteIdxGz(root + "/train-images-idx3-ubyte.gz", {4, 28, 28}, images);
  WriteIdxGz(root + "/train-labels-idx1-ubyte.gz", {static_cast<uint32_t>(labels.size(0))}, labels);
  return root;
}

TEST(FashionMnistTest, ReadsASplitFromRoot) {
  const std::string root = WriteTinySplit("tiny", at::tensor({9, 0, 3, 3}, at::kByte));
  absl::StatusOr<std::shared_ptr<Dataset>> dataset =
      MakeDataset("fashion_mnist", {{"root", root}, {"mean", 0.5}, {"std", 0.25}});
  ASSERT_THAT(dataset, IsOk());
  EXPECT_EQ((*dataset)->size(), 4);
  EXPECT_EQ((*dataset)->num_classes(), 10);
  const Batch batch = (*dataset)->Get(at::tensor({2, 0}, at::kLong), uint64_t{0});
  const at::Tensor x = batch.samples.toTensor();
  ASSERT_EQ(x.sizes(), at::IntArrayRef({2, 1, 28, 28}));
  // Image 2 is 30/255 everywhere but (0, 0): normalized (30/255 - 0.5) / 0.25.
  EXPECT_NEAR(x[0][0][5][7].item<double>(), (30.0 / 255 - 0.5) / 0.25, 1e-6);
  EXPECT_NEAR(x[0][0][0][0].item<double>(), (1.0 - 0.5) / 0.25, 1e-6);
  EXPECT_NEAR(x[1][0][27][27].item<double>(), (10.0 / 255 - 0.5) / 0.25, 1e-6);
  EXPECT_THAT(batch.targets, IValueNear(at::tensor({3, 9}, at::kLong), 0));
  EXPECT_EQ(batch.targets.toTensor().scalar_type(), at::kLong);
}

TEST(FashionMnistTest, AppliesCropAndFlipAsSeeded) {
  const std::string root = WriteTinySplit("tiny_aug", at::tensor({9, 0, 3, 3}, at::kByte));
  absl::StatusOr<std::shared_ptr<Dataset>> plain = MakeDataset("fashion_mnist", {{"root", root}});
  absl::StatusOr<std::shared_ptr<Dataset>> augmented =
      MakeDataset("fashion_mnist",
                  {{"root", root}, {"random_crop_padding", int64_t{4}}, {"horizontal_flip", true}});
  ASSERT_THAT(plain, IsOk());
  ASSERT_THAT(augmented, IsOk());
  const at::Tensor indices = at::tensor({0, 1, 2, 3, 0, 1, 2, 3}, at::kLong);
  const at::Tensor x = (*plain)->Get(indices, uint64_t{5}).samples.toTensor();
  const at::Tensor y = (*augmented)->Get(indices, uint64_t{5}).samples.toTensor();
  ASSERT_EQ(y.sizes(), x.sizes());
  EXPECT_FALSE(y.equal(x));
  // The documented order, crop (tops, lefts) then flip, from one generator seeded with 5.
  at::Generator gen = at::detail::createCPUGenerator(5);
  const at::Tensor top = at::randint(0, 9, {8}, gen);
  const at::Tensor left = at::randint(0, 9, {8}, gen);
  const at::Tensor flip = at::rand({8}, gen).lt(0.5);
  const at::Tensor expected = CropAndFlip(x, 4, top, left, flip);
  EXPECT_THAT(y, IValueNear(expected, 0));
  EXPECT_TRUE((*augmented)->Get(indices, uint64_t{5}).samples.toTensor().equal(y));
}

TEST(FashionMnistTest, MissingFilesSayHowToInstall) {
  const std::string root = ::testing::TempDir() + "/no-fashion-mnist-here";
  EXPECT_THAT(MakeDataset("fashion_mnist", {{"root", root}, {"split", "test"}}),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr(root + "/t10k-images-idx3-ubyte.gz"),
                             HasSubstr("install Debian's dataset-fashion-mnist (apt-get install "
                                       "dataset-fashion-mnist)"))));
}

TEST(FashionMnistTest, LabelCountMismatchNamesTheFile) {
  const std::string root = WriteTinySplit("short_labels", at::tensor({1, 2, 3}, at::kByte));
  EXPECT_THAT(MakeDataset("fashion_mnist", {{"root", root}}),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(root + "/train-labels-idx1-ubyte.gz"),
                             HasSubstr("holds 3 labels but train-images-idx3-ubyte.gz holds 4"))));
}

TEST(FashionMnistTest, LabelOutOfRangeNamesTheFile) {
  const std::string root = WriteTinySplit("bad_label", at::tensor({1, 2, 10, 3}, at::kByte));
  EXPECT_THAT(
      MakeDataset("fashion_mnist", {{"root", root}}),
      StatusIs(absl::StatusCode::kDataLoss,
               AllOf(HasSubstr(root + "/train-labels-idx1-ubyte.gz"), HasSubstr("the label 10"))));
}

TEST(FashionMnistTest, ImagesOfWrongRankNameTheFile) {
  const std::string root = ::testing::TempDir() + "/flat_images";
  mkdir(root.c_str(), 0755);
  WriteIdxGz(root + "/train-images-idx3-ubyte.gz", {4, 784}, at::zeros({4, 784}, at::kByte));
  WriteIdxGz(root + "/train-labels-idx1-ubyte.gz", {4}, at::zeros({4}, at::kByte));
  EXPECT_THAT(
      MakeDataset("fashion_mnist", {{"root", root}}),
      StatusIs(absl::StatusCode::kDataLoss,
               AllOf(HasSubstr(root + "/train-images-idx3-ubyte.gz"), HasSubstr("[4, 784]"))));
}

// The real data set: the published sizes, class balance, first label and pixel statistics
// (Xiao et al. 2017; mean 0.2860 and std 0.3530 of the training pixels in [0, 1]).
class RealFashionMnistTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Exists(std::string(kRealRoot) + "/train-images-idx3-ubyte.gz")) {
      GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
    }
  }
};

TEST_F(RealFashionMnistTest, TrainSplit) {
  absl::StatusOr<std::shared_ptr<Dataset>> train = MakeDataset("fashion_mnist", {});
  ASSERT_THAT(train, IsOk());
  ASSERT_EQ((*train)->size(), 60000);
  at::Tensor counts = at::zeros({10}, at::kLong);
  double sum = 0, sum_of_squares = 0;
  for (int64_t start = 0; start < 60000; start += 10000) {
    const Batch batch = (*train)->Get(at::arange(start, start + 10000, at::kLong), uint64_t{0});
    const at::Tensor x = batch.samples.toTensor().to(at::kDouble);
    ASSERT_EQ(x.sizes(), at::IntArrayRef({10000, 1, 28, 28}));
    sum += x.sum().item<double>();
    sum_of_squares += x.square().sum().item<double>();
    counts += at::bincount(batch.targets.toTensor(), {}, 10);
    if (start == 0) {
      EXPECT_EQ(batch.targets.toTensor()[0].item<int64_t>(), 9);
    }
  }
  EXPECT_TRUE(counts.eq(6000).all().item<bool>()) << counts;
  const double n = 60000.0 * 28 * 28;
  const double mean = sum / n;
  EXPECT_NEAR(mean, 0.2860, 0.0005);
  EXPECT_NEAR(std::sqrt(sum_of_squares / n - mean * mean), 0.3530, 0.0005);
}

TEST_F(RealFashionMnistTest, TestSplit) {
  absl::StatusOr<std::shared_ptr<Dataset>> test = MakeDataset("fashion_mnist", {{"split", "test"}});
  ASSERT_THAT(test, IsOk());
  ASSERT_EQ((*test)->size(), 10000);
  const Batch batch = (*test)->Get(at::arange(10000, at::kLong), uint64_t{0});
  EXPECT_TRUE(at::bincount(batch.targets.toTensor(), {}, 10).eq(1000).all().item<bool>());
}

}  // namespace
}  // namespace kd
