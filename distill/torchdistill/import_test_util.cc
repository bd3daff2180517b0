#include "distill/torchdistill/import_test_util.h"

#include <string>

#include "distill/config/config_loader.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace torchdistill {
namespace test {

std::string TestData(const std::string& name) {
  return ::kd::test::RunfilePath("distill/torchdistill/testdata/" + name);
}

DistillConfig Original(const std::string& name) {
  absl::StatusOr<LoadedConfig> loaded =
      LoadConfig(::kd::test::RunfilePath("tools/configs/" + name));
  EXPECT_THAT(loaded, IsOk());
  return loaded.ok() ? loaded->config : DistillConfig();
}

// The dataset kwarg "root" removed: torchvision's root (its files under <root>/FashionMNIST/raw)
// has no counterpart in configs that read Debian's files. And a subset to the end: Python's
// range has a stop, libkd's subset to the last of Fashion-MNIST's 60000 training images not.
DistillConfig WithoutRoots(DistillConfig config) {
  for (DatasetConfig& dataset : *config.mutable_datasets()) {
    if (dataset.subset().stop() == 60000) dataset.mutable_subset()->clear_stop();
    auto* kwargs = dataset.mutable_kwargs();
    for (int i = kwargs->size() - 1; i >= 0; --i) {
      if (kwargs->Get(i).name() == "root") kwargs->DeleteSubrange(i, 1);
    }
  }
  return config;
}

void ExpectSameConfig(const DistillConfig& imported, const DistillConfig& original) {
  google::protobuf::util::MessageDifferencer differ;
  std::string report;
  differ.ReportDifferencesToString(&report);
  differ.TreatAsSet(DatasetConfig::descriptor()->FindFieldByName("kwargs"));
  EXPECT_TRUE(differ.Compare(imported, original)) << report;
}

}  // namespace test
}  // namespace torchdistill
}  // namespace kd
