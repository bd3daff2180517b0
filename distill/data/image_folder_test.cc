// "image_folder" against torchvision's ImageFolder and transforms (tensor path), recorded by
// tests/testdata/make_image_folder_fixtures.py with the pinned venv.
#include "distill/data/image_folder.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "distill/data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

nlohmann::json Expected() {
  std::ifstream in(test::FixturePath("image_folder_expected.json"));
  EXPECT_TRUE(in.good());
  return in.good() ? nlohmann::json::parse(in) : nlohmann::json::object();
}

std::string Root() { return test::FixturePath("image_folder"); }

// torchvision's ImageFolder(root).classes and .samples: sorted classes, files walked in order,
// only image extensions (any case), nested folders included.
TEST(ImageFolderTest, ListsAsTorchvision) {
  const nlohmann::json expected = Expected();
  absl::StatusOr<ImageFolderListing> listing = ListImageFolder(Root());
  ASSERT_THAT(listing, IsOk());
  EXPECT_EQ(listing->classes, expected.at("classes").get<std::vector<std::string>>());
  std::vector<std::pair<std::string, int64_t>> samples;
  for (const auto& [path, target] : listing->samples) {
    ASSERT_EQ(path.compare(0, Root().size() + 1, Root() + "/"), 0) << path;
    samples.emplace_back(path.substr(Root().size() + 1), target);
  }
  EXPECT_EQ(samples, (expected.at("samples").get<std::vector<std::pair<std::string, int64_t>>>()));
}

TEST(ImageFolderTest, RandomResizedCropDrawsAsTorchvision) {
  const nlohmann::json expected = Expected();
  ASSERT_EQ(expected.at("crops").size(), 9u);
  for (const nlohmann::json& c : expected.at("crops")) {
    SCOPED_TRACE(c.dump());
    at::Generator generator =
        at::make_generator<at::CPUGeneratorImpl>(c.at("seed").get<uint64_t>());
    const std::array<int64_t, 4> params = RandomResizedCropParams(
        c.at("height"), c.at("width"), {0.08, 1.0}, {3.0 / 4, 4.0 / 3}, generator);
    EXPECT_EQ(std::vector<int64_t>(params.begin(), params.end()),
              c.at("params").get<std::vector<int64_t>>());
  }
}

// The training pipeline (RandomResizedCrop(16), flip, ToTensor, Normalize) and the evaluation one
// (Resize(20), CenterCrop(16), ToTensor, Normalize) on the script's images, for its seeds.
TEST(ImageFolderTest, TransformsEqualTorchvisionsTensorPath) {
  const nlohmann::json expected = Expected();
  ASSERT_EQ(expected.at("pipelines").size(), 8u);
  const std::vector<double> mean = {0.485, 0.456, 0.406}, std = {0.229, 0.224, 0.225};
  for (const nlohmann::json& c : expected.at("pipelines")) {
    SCOPED_TRACE(c.at("pipeline").get<std::string>() + " seed " + c.at("seed").dump() + " " +
                 c.at("height").dump() + "x" + c.at("width").dump());
    const std::vector<uint8_t> bytes = c.at("image").get<std::vector<uint8_t>>();
    const int64_t h = c.at("height"), w = c.at("width");
    const at::Tensor chw = at::tensor(bytes, at::kByte).view({3, h, w});
    ImageFolderTransforms t{.mean = mean, .std = std};
    if (c.at("pipeline") == "train") {
      t.random_resized_crop = 16;
      t.horizontal_flip = true;
    } else {
      t.resize = 20;
      t.center_crop = 16;
    }
    at::Generator generator =
        at::make_generator<at::CPUGeneratorImpl>(c.at("seed").get<uint64_t>());
    const at::Tensor y = TransformImage(chw, t, generator);
    const std::vector<int64_t> shape = c.at("shape").get<std::vector<int64_t>>();
    ASSERT_EQ(y.sizes(), at::IntArrayRef(shape));
    const at::Tensor want = at::tensor(c.at("values").get<std::vector<float>>()).view(shape);
    EXPECT_TRUE(at::allclose(y, want, 0, 1e-6)) << (y - want).abs().max();
  }
}

// The dataset: batches of the listed files, decoded and transformed; the targets the classes.
TEST(ImageFolderTest, DatasetBatchesTheFiles) {
  absl::StatusOr<std::shared_ptr<Dataset>> dataset = MakeDataset(
      "image_folder", {{"root", Root()}, {"resize", int64_t{16}}, {"center_crop", int64_t{16}}});
  ASSERT_THAT(dataset, IsOk());
  EXPECT_EQ((*dataset)->size(), 6);
  EXPECT_EQ((*dataset)->num_classes(), 3);
  EXPECT_TRUE((*dataset)->ListTargets()->equal(at::tensor({0, 1, 1, 2, 2, 2}, at::kLong)));
  const Batch batch = (*dataset)->Get(at::arange(6, at::kLong), uint64_t{1});
  EXPECT_EQ(batch.samples.toTensor().sizes(), at::IntArrayRef({6, 3, 16, 16}));
  EXPECT_GE(batch.samples.toTensor().min().item<float>(), 0.0f);
  EXPECT_LE(batch.samples.toTensor().max().item<float>(), 1.0f);
  EXPECT_EQ((*dataset)->NumTransforms(), 1);  // nothing random: the teacher cache keys on indices
  absl::StatusOr<std::shared_ptr<Dataset>> flipping =
      MakeDataset("image_folder", {{"root", Root()},
                                   {"resize", int64_t{16}},
                                   {"center_crop", int64_t{16}},
                                   {"horizontal_flip", true}});
  ASSERT_THAT(flipping, IsOk());
  EXPECT_EQ((*flipping)->NumTransforms(), 2);
  const Batch flipped = (*flipping)->Get(at::arange(6, at::kLong), uint64_t{1});
  const auto supp = c10::impl::toTypedDict<std::string, at::Tensor>(flipped.supp.toGenericDict());
  ASSERT_TRUE(supp.contains("transform"));
  const at::Tensor ways = supp.at("transform");
  for (int64_t i = 0; i < 6; ++i) {
    const at::Tensor plain = batch.samples.toTensor()[i];
    const at::Tensor got = flipped.samples.toTensor()[i];
    EXPECT_TRUE(at::equal(got, ways[i].item<int64_t>() == 1 ? plain.flip({2}) : plain)) << i;
  }
  absl::StatusOr<std::shared_ptr<Dataset>> cropping =
      MakeDataset("image_folder", {{"root", Root()}, {"random_resized_crop", int64_t{8}}});
  ASSERT_THAT(cropping, IsOk());
  EXPECT_EQ((*cropping)->NumTransforms(), 0);
}

TEST(ImageFolderTest, BadFoldersAreNamed) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "image_folder_bad";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "empty_class");
  std::filesystem::create_directories(dir / "full");
  std::filesystem::copy_file(std::filesystem::path(Root()) / "ant" / "x.jpg",
                             dir / "full" / "x.jpg");
  EXPECT_THAT(ListImageFolder(dir.string()),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("found no image file for the classes empty_class")));
  EXPECT_THAT(ListImageFolder((dir / "full").string()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("couldn't find any class folder")));
  EXPECT_THAT(ListImageFolder((dir / "nope").string()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("is not a folder")));
  // A corrupt file fails its batch, naming the sample and the file.
  std::filesystem::remove_all(dir / "empty_class");
  { std::ofstream(dir / "full" / "y.jpg") << "\xFF\xD8\xFF truncated"; }
  std::filesystem::create_directories(dir / "root" / "a");
  std::filesystem::rename(dir / "full", dir / "root" / "a" / "full");
  absl::StatusOr<std::shared_ptr<Dataset>> dataset =
      MakeDataset("image_folder", {{"root", (dir / "root").string()}});
  ASSERT_THAT(dataset, IsOk());
  try {
    (void)(*dataset)->Get(at::tensor({1}, at::kLong), uint64_t{0});
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("image_folder sample 1: image "));
    EXPECT_THAT(e.what(), HasSubstr("y.jpg: corrupt JPEG"));
  }
}

}  // namespace
}  // namespace kd
