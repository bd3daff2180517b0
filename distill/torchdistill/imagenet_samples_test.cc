// torchdistill's ImageNet sample configs run as they are: each file under testdata/samples (the
// text of torchdistill's configs/sample/ilsvrc2012 at the commit its folder names) imports whole,
// validates, and trains two steps and evaluates on a small ILSVRC 2012 tree
// (tests/testdata/imagenet_folder: JPEG and PNG files at ImageNet's sizes) put where the config
// looks (~/datasets/ilsvrc2012), with the named torchvision architectures at random init: the
// weight files the configs ask for are written where torch.hub keeps them (~/.cache/torch/hub),
// from a model at random init, and loaded as the configs load them.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

std::vector<std::string> SampleFiles() {
  std::vector<std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(test::TestData("samples"))) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// A random-init state file for the model `config` builds (without its src_ckpt) at `path`.
void WriteRandomWeights(ModelConfig config, const std::string& path) {
  config.clear_src_ckpt();
  config.set_ignore_mismatched_sizes(false);
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(config, "", "teacher");
  ASSERT_THAT(model, IsOk());
  fs::create_directories(fs::path(path).parent_path());
  ASSERT_THAT((*model)->SaveState(path), IsOk());
}

class ImagenetSamplesTest : public BoxTest {
 protected:
  void SetUp() override {
    BoxTest::SetUp();
    home_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/home");
    fs::create_directories(home_ + "/datasets");
    fs::copy(::kd::test::FixturePath("imagenet_folder"), home_ + "/datasets/ilsvrc2012",
             fs::copy_options::recursive | fs::copy_options::skip_existing);
    setenv("HOME", home_.c_str(), /*overwrite=*/1);
  }
  void RunSample(const std::string& file);
  std::string home_;
};

TEST_F(ImagenetSamplesTest, EachImportsWholeAndTrainsTwoStepsAndEvaluates) {
  const std::vector<std::string> files = SampleFiles();
  ASSERT_EQ(files.size(), 32u);
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    const auto start = std::chrono::steady_clock::now();
    RunSample(file);
    std::cerr << file.substr(file.find("samples/")) << ": "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
              << " s\n";
  }
}

void ImagenetSamplesTest::RunSample(const std::string& file) {
  {
    // As //tools:import_torchdistill: the models' module paths resolve negative indices.
    const auto module_paths = [](const ModelConfig& model) {
      ModelConfig structure = model;
      structure.clear_src_ckpt();
      std::vector<std::string> paths;
      absl::StatusOr<std::unique_ptr<Model>> built = LoadModel(structure, "", "model");
      if (built.ok()) {
        for (const ModuleInfo& m : (*built)->NamedModules()) paths.push_back(m.path);
      }
      return paths;
    };
    absl::StatusOr<Import> imported = ImportFile(file, {.seed = 1, .module_paths = module_paths});
    ASSERT_THAT(imported, IsOk());
    EXPECT_THAT(imported->unsupported, IsEmpty());
    DistillConfig config = imported->config;
    // The teacher's torchvision weights: the file torch.hub would have downloaded.
    const std::string weights = config.teacher().src_ckpt();
    ASSERT_EQ(weights.rfind(home_ + "/.cache/torch/hub/checkpoints/", 0), 0u) << weights;
    if (!fs::exists(weights)) WriteRandomWeights(config.teacher(), weights);
    // A custom_* student starts from its original's file (the teacher's here), the rest.
    if (!config.student().src_ckpt().empty()) {
      EXPECT_EQ(config.student().src_ckpt(), weights);
      EXPECT_TRUE(config.student().ignore_mismatched_sizes());
    }
    // Two steps of two images, one evaluation of the two validation images; no output outside
    // the run's folder.
    const std::string dir = RunDir(fs::path(file).parent_path().filename().string() + "_" +
                                   fs::path(file).stem().string());
    config.mutable_student()->set_dst_ckpt(dir + "/student.pt");
    std::vector<StageConfig*> stages;
    if (config.has_train()) stages.push_back(config.mutable_train());
    for (StageConfig& stage : *config.mutable_stages()) stages.push_back(&stage);
    for (StageConfig* stage : stages) {
      stage->set_num_epochs(1);
      if (stage->has_train_data_loader()) {
        stage->mutable_train_data_loader()->set_batch_size(2);
        stage->mutable_train_data_loader()->set_num_workers(0);
      }
      if (stage->has_val_data_loader()) {
        stage->mutable_val_data_loader()->set_batch_size(2);
        stage->mutable_val_data_loader()->set_num_workers(0);
      }
    }
    absl::StatusOr<std::unique_ptr<Box>> box = MakeBox(config, {.run_dir = dir});
    ASSERT_THAT(box, IsOk());
    ASSERT_THAT((*box)->Run(), IsOk());
    EXPECT_TRUE(fs::exists(dir + "/student.pt"));
  }
}

}  // namespace
}  // namespace torchdistill
}  // namespace kd
