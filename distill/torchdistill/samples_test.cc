// torchdistill's own sample configs run as they are: each file under testdata/samples (the text
// of torchdistill's configs/sample at the commit its folder names) imports with nothing
// reported, validates, and trains and evaluates on small data put where the config looks
// (~/datasets/...), with its architectures at random init: the weight files a config asks for
// (torchvision's, torchdistill's CIFAR checkpoints) are written where torch.hub keeps them
// (~/.cache/torch/hub/checkpoints), from the model at random init, and loaded as the config loads
// them.
//   ImageNet: a tiny ILSVRC 2012 tree (tests/testdata/imagenet_folder: JPEG and PNG files at
//     ImageNet's sizes); two steps of two images and an evaluation of two.
//   CIFAR-10/100: binary files of 5 training and 2 test images; one step on the training part
//     (split_dataset's 4 of 5 in the hyperparameter-tuning form) and an evaluation.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "distill/boxes/box.h"
#include "distill/boxes/model_paths.h"
#include "distill/boxes/testing/box_test_fixture.h"
#include "distill/config/distill_config.pb.h"
#include "distill/torchdistill/import_test_util.h"
#include "distill/torchdistill/importer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hooks/model.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace torchdistill {
namespace {

namespace fs = std::filesystem;
using ::kd::test::BoxTest;
using ::kd::test::RunDir;
using ::testing::IsEmpty;

// The sample files whose path holds `dataset` ("/ilsvrc2012/", "/cifar"), sorted.
std::vector<std::string> SampleFiles(const std::string& dataset) {
  std::vector<std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(test::TestData("samples"))) {
    const std::string path = entry.path().string();
    if (entry.path().extension() == ".yaml" && absl::StrContains(path, dataset)) {
      files.push_back(path);
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// A random-init state file for the model `config` builds (without its src_ckpt) at `path`.
void WriteRandomWeights(ModelConfig config, const std::string& path) {
  config.clear_src_ckpt();
  config.set_ignore_mismatched_sizes(false);
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(config, "", "model");
  ASSERT_THAT(model, IsOk());
  fs::create_directories(fs::path(path).parent_path());
  ASSERT_THAT((*model)->SaveState(path), IsOk());
}

// CIFAR's binary files of `train` and `test` random images: CIFAR-10's five training batches
// (one image each) and test batch, or CIFAR-100's train.bin and test.bin (coarse and fine labels).
void WriteCifar(const std::string& dir, bool cifar100, int train, int test) {
  fs::create_directories(dir);
  std::mt19937 random(cifar100 ? 100 : 10);
  const auto records = [&](int n) {
    std::string out;
    for (int i = 0; i < n; ++i) {
      if (cifar100) out += static_cast<char>(random() % 20);
      out += static_cast<char>(random() % (cifar100 ? 100 : 10));
      for (int p = 0; p < 3072; ++p) out += static_cast<char>(random() % 256);
    }
    return out;
  };
  if (cifar100) {
    ASSERT_THAT(WriteFileAtomically(dir + "/train.bin", records(train)), IsOk());
    ASSERT_THAT(WriteFileAtomically(dir + "/test.bin", records(test)), IsOk());
    return;
  }
  for (int f = 1; f <= 5; ++f) {
    ASSERT_THAT(WriteFileAtomically(absl::StrCat(dir, "/data_batch_", f, ".bin"),
                                    records(train / 5 + (f <= train % 5 ? 1 : 0))),
                IsOk());
  }
  ASSERT_THAT(WriteFileAtomically(dir + "/test_batch.bin", records(test)), IsOk());
}

class SamplesTest : public BoxTest {
 protected:
  void SetUp() override {
    BoxTest::SetUp();
    home_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/home");
    fs::create_directories(home_ + "/datasets");
    fs::copy(::kd::test::FixturePath("imagenet_folder"), home_ + "/datasets/ilsvrc2012",
             fs::copy_options::recursive | fs::copy_options::skip_existing);
    WriteCifar(home_ + "/datasets/cifar10/cifar-10-batches-bin", false, 5, 2);
    WriteCifar(home_ + "/datasets/cifar100/cifar-100-binary", true, 5, 2);
    setenv("HOME", home_.c_str(), /*overwrite=*/1);
  }

  // Imports `file`, writes the weight files it names, and runs it with `batch_size` for every
  // loader (one epoch per stage).
  void RunSample(const std::string& file, int batch_size) {
    absl::StatusOr<Import> imported =
        ImportFile(file, {.seed = 1, .module_paths = [](const ModelConfig& model) {
                            return ModelModulePaths(model, "");
                          }});
    ASSERT_THAT(imported, IsOk());
    EXPECT_THAT(imported->unsupported, IsEmpty());
    DistillConfig config = imported->config;
    const std::string hub = home_ + "/.cache/torch/hub/checkpoints/";
    std::vector<ModelConfig*> models;
    if (config.has_teacher()) models.push_back(config.mutable_teacher());
    if (config.has_student()) models.push_back(config.mutable_student());
    for (ModelConfig* model : models) {
      const std::string& weights = model->src_ckpt();
      if (weights.empty() || fs::exists(weights)) continue;
      // Only files torch.hub keeps: a custom_* student's is its original's, the teacher's.
      ASSERT_TRUE(absl::StartsWith(weights, hub)) << weights;
      ASSERT_FALSE(model->ignore_mismatched_sizes()) << weights;
      WriteRandomWeights(*model, weights);
    }
    // No output outside the run's folder.
    const std::string dir = RunDir(fs::path(file).parent_path().filename().string() + "_" +
                                   fs::path(file).stem().string());
    if (config.has_student()) config.mutable_student()->set_dst_ckpt(dir + "/student.pt");
    std::vector<StageConfig*> stages;
    if (config.has_train()) stages.push_back(config.mutable_train());
    for (StageConfig& stage : *config.mutable_stages()) stages.push_back(&stage);
    for (StageConfig* stage : stages) {
      stage->set_num_epochs(1);
      for (const bool train : {true, false}) {
        if (train ? !stage->has_train_data_loader() : !stage->has_val_data_loader()) continue;
        LoaderConfig* loader =
            train ? stage->mutable_train_data_loader() : stage->mutable_val_data_loader();
        loader->set_batch_size(batch_size);
        loader->set_num_workers(0);
      }
    }
    absl::StatusOr<std::unique_ptr<Box>> box = MakeBox(config, {.run_dir = dir});
    ASSERT_THAT(box, IsOk());
    ASSERT_THAT((*box)->Run(), IsOk());
    if (config.has_student()) {
      EXPECT_TRUE(fs::exists(dir + "/student.pt"));
    }
  }

  void RunAll(const std::vector<std::string>& files, int batch_size) {
    for (const std::string& file : files) {
      SCOPED_TRACE(file);
      const auto start = std::chrono::steady_clock::now();
      RunSample(file, batch_size);
      std::cerr << file.substr(file.find("samples/")) << ": "
                << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
                << " s\n";
    }
  }

  std::string home_;
};

// 32 of the 33 files of configs/sample/ilsvrc2012 (the 33rd is stored only in a pre-1.0 form).
TEST_F(SamplesTest, ImagenetSamplesImportWholeAndTrainTwoStepsAndEvaluate) {
  const std::vector<std::string> files = SampleFiles("/ilsvrc2012/");
  ASSERT_EQ(files.size(), 32u);
  RunAll(files, 2);
}

// The 35 files of configs/sample/cifar10 and cifar100 stored in 1.x's final format (the
// hyperparameter-tuning ones with split_dataset and !access_by_index_or_key).
TEST_F(SamplesTest, CifarSamplesImportWholeAndTrainAStepAndEvaluate) {
  const std::vector<std::string> files = SampleFiles("/cifar");
  ASSERT_EQ(files.size(), 35u);
  RunAll(files, 8);
}

}  // namespace
}  // namespace torchdistill
}  // namespace kd
