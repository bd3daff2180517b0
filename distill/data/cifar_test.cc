// "cifar10" and "cifar100" on small binary files written here: records, labels (CIFAR-100's
// fine one), the per-channel Normalize, the crop-and-flip transforms, and bad files.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "distill/data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Record k's channel c is all 10 * k + c + 1, but pixel (0, 0) of each channel, which is 255;
// `label_bytes` label bytes first (CIFAR-100: coarse 7, then the fine label).
std::string Record(int k, const std::vector<uint8_t>& labels) {
  std::string r(labels.begin(), labels.end());
  for (int c = 0; c < 3; ++c) {
    std::string plane(1024, static_cast<char>(10 * k + c + 1));
    plane[0] = static_cast<char>(255);
    r += plane;
  }
  return r;
}

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  ASSERT_TRUE(out.good()) << path;
}

// A CIFAR-10 root: five training files of two records each (labels 0..9 in order) and a test
// file of three (labels 9, 8, 7).
std::string WriteCifar10(const std::string& name) {
  const std::string root = ::testing::TempDir() + "/" + name;
  mkdir(root.c_str(), 0755);
  mkdir((root + "/cifar-10-batches-bin").c_str(), 0755);
  for (int f = 0; f < 5; ++f) {
    Write(absl::StrCat(root, "/cifar-10-batches-bin/data_batch_", f + 1, ".bin"),
          Record(2 * f, {static_cast<uint8_t>(2 * f)}) +
              Record(2 * f + 1, {static_cast<uint8_t>(2 * f + 1)}));
  }
  Write(root + "/cifar-10-batches-bin/test_batch.bin",
        Record(0, {9}) + Record(1, {8}) + Record(2, {7}));
  return root;
}

TEST(CifarTest, ReadsRecordsAndNormalizesPerChannel) {
  const std::string root = WriteCifar10("c10");
  const std::vector<double> mean = {0.49139968, 0.48215841, 0.44653091};
  const std::vector<double> std = {0.24703223, 0.24348513, 0.26158784};
  absl::StatusOr<std::shared_ptr<Dataset>> train =
      MakeDataset("cifar10", {{"root", root}, {"mean", mean}, {"std", std}});
  ASSERT_THAT(train, IsOk());
  EXPECT_EQ((*train)->size(), 10);
  EXPECT_EQ((*train)->num_classes(), 10);
  const Batch batch = (*train)->Get(at::tensor({7, 0}, at::kLong), uint64_t{0});
  const at::Tensor x = batch.samples.toTensor();
  ASSERT_EQ(x.sizes(), (std::vector<int64_t>{2, 3, 32, 32}));
  EXPECT_TRUE(batch.targets.toTensor().equal(at::tensor({7, 0}, at::kLong)));
  for (int b = 0; b < 2; ++b) {
    const int k = b == 0 ? 7 : 0;
    for (int c = 0; c < 3; ++c) {
      SCOPED_TRACE(absl::StrCat("record ", k, " channel ", c));
      const double pixel = ((10 * k + c + 1) / 255.0 - mean[c]) / std[c];
      const double corner = (255 / 255.0 - mean[c]) / std[c];
      EXPECT_NEAR(x[b][c][5][9].item<double>(), pixel, 1e-6);
      EXPECT_NEAR(x[b][c][0][0].item<double>(), corner, 1e-6);
    }
  }
  absl::StatusOr<std::shared_ptr<Dataset>> test =
      MakeDataset("cifar10", {{"root", root + "/cifar-10-batches-bin"}, {"split", "test"}});
  ASSERT_THAT(test, IsOk());  // root may also be the files' own folder
  EXPECT_TRUE((*test)->ListTargets()->equal(at::tensor({9, 8, 7}, at::kLong)));
  // without Normalize: ToTensor's [0, 1]
  EXPECT_NEAR((*test)
                  ->Get(at::tensor({2}, at::kLong), uint64_t{0})
                  .samples.toTensor()[0][2][1][1]
                  .item<double>(),
              23 / 255.0, 1e-7);
}

TEST(CifarTest, CropAndFlipAreTransformsOfTheirOwn) {
  const std::string root = WriteCifar10("c10_aug");
  absl::StatusOr<std::shared_ptr<Dataset>> plain = MakeDataset("cifar10", {{"root", root}});
  absl::StatusOr<std::shared_ptr<Dataset>> augmented = MakeDataset(
      "cifar10", {{"root", root}, {"random_crop_padding", int64_t{4}}, {"horizontal_flip", true}});
  ASSERT_THAT(plain, IsOk());
  ASSERT_THAT(augmented, IsOk());
  const at::Tensor all = at::arange(10, at::kLong);
  const Batch batch = (*augmented)->Get(all, uint64_t{3});
  const at::Tensor ids = batch.supp.toGenericDict().at(std::string(kTransformKey)).toTensor();
  EXPECT_TRUE((ids >= 0).all().item<bool>() && (ids < 9 * 9 * 2).all().item<bool>());
  // The same seed, the same crops and flips; the pixels stay the record's (a crop and a flip
  // move them, padding adds zeros)
  EXPECT_TRUE(
      (*augmented)->Get(all, uint64_t{3}).samples.toTensor().equal(batch.samples.toTensor()));
  const at::Tensor x = batch.samples.toTensor(),
                   y = (*plain)->Get(all, uint64_t{3}).samples.toTensor();
  for (int64_t i = 0; i < 10; ++i) {
    const at::Tensor kept = x[i][1].masked_select(x[i][1] != 0);
    EXPECT_TRUE(at::isin(kept, y[i][1].flatten()).all().item<bool>()) << i;
  }
}

TEST(CifarTest, Cifar100TakesTheFineLabel) {
  const std::string root = ::testing::TempDir() + "/c100";
  mkdir(root.c_str(), 0755);
  mkdir((root + "/cifar-100-binary").c_str(), 0755);
  Write(root + "/cifar-100-binary/train.bin", Record(0, {7, 42}) + Record(1, {3, 99}));
  absl::StatusOr<std::shared_ptr<Dataset>> train = MakeDataset("cifar100", {{"root", root}});
  ASSERT_THAT(train, IsOk());
  EXPECT_EQ((*train)->num_classes(), 100);
  EXPECT_TRUE((*train)->ListTargets()->equal(at::tensor({42, 99}, at::kLong)));
  EXPECT_THAT(
      MakeDataset("cifar100", {{"root", root}, {"split", "test"}}),
      StatusIs(absl::StatusCode::kNotFound,
               AllOf(HasSubstr("cifar100: no file " + root + "/cifar-100-binary/test.bin"),
                     HasSubstr("cifar-100-binary.tar.gz"), HasSubstr("tools/cifar_to_binary.py"))));
}

TEST(CifarTest, BadFilesAndKwargsSayWhat) {
  const std::string root = WriteCifar10("c10_bad");
  Write(root + "/cifar-10-batches-bin/test_batch.bin", Record(0, {3}) + "xyz");
  EXPECT_THAT(MakeDataset("cifar10", {{"root", root}, {"split", "test"}}),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("test_batch.bin: 3076 bytes, not a whole number of 3073-byte "
                                 "records")));
  Write(root + "/cifar-10-batches-bin/test_batch.bin", Record(0, {10}));
  EXPECT_THAT(MakeDataset("cifar10", {{"root", root}, {"split", "test"}}),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("a record's label is 10; the classes are 0 to 9")));
  EXPECT_THAT(MakeDataset("cifar10", {{"root", root}, {"mean", std::vector<double>{0.5}}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mean takes 3 values (red, green, blue); got 1")));
}

// Roots a hostile or careless user gives: a symbolic-link loop, a root longer than a path may
// be, and a batch file far larger than any CIFAR file. Each is an error naming it, not an
// uncaught std::filesystem_error or bad_alloc.
TEST(CifarTest, BadRootsAndHugeFilesAreErrors) {
  const std::string dir = ::testing::TempDir() + "/c10_roots";
  mkdir(dir.c_str(), 0755);
  const std::string loop = dir + "/loop";
  unlink(loop.c_str());
  ASSERT_EQ(symlink(loop.c_str(), loop.c_str()), 0);
  EXPECT_THAT(MakeDataset("cifar10", {{"root", loop}, {"split", "test"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("symbolic links form a loop")));
  const std::string long_root = "/" + std::string(5000, 'r');
  EXPECT_THAT(MakeDataset("cifar10", {{"root", long_root}, {"split", "test"}}).status(),
              ::testing::Not(IsOk()));
  const std::string root = WriteCifar10("c10_huge");
  const std::string huge = root + "/cifar-10-batches-bin/test_batch.bin";
  ASSERT_EQ(truncate(huge.c_str(), int64_t{300} << 20), 0);  // sparse: no disk used
  EXPECT_THAT(MakeDataset("cifar10", {{"root", root}, {"split", "test"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("test_batch.bin: is 300.0 MiB, more than the 256.0 MiB this file "
                                 "may hold")));
}

}  // namespace
}  // namespace kd
