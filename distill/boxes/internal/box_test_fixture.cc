#include "distill/boxes/internal/box_test_fixture.h"

#include <filesystem>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "absl/strings/str_cat.h"
#include "base/torch_file.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace test {

namespace fs = std::filesystem;

std::string Stage(const std::string& name, int epochs, const std::string& loss) {
  return absl::StrCat(
      R"pb(
        name: ")pb",
      name, R"pb("
                 num_epochs:)pb",
      epochs, R"pb(
        train_data_loader { dataset_id: "train" batch_size: 32 shuffle: true }
        val_data_loader { dataset_id: "val" batch_size: 64 }
        optimizer {
          key: "SGD"
          kwargs { name: "lr" number: 0.1 }
          kwargs { name: "momentum" number: 0.9 }
        }
        scheduler {
          key: "MultiStepLR"
          kwargs {
            name: "milestones"
            integers { values: [ 2 ] }
          }
        }
      )pb",
      loss);
}

DistillConfig Parse(const std::string& text) {
  DistillConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config)) << text;
  return config;
}

std::string RunDir(const std::string& name) {
  const std::string dir = TempPath(name);
  fs::remove_all(dir);
  return dir;
}

void ExpectSameStudent(const std::string& dir_a, const std::string& dir_b) {
  const auto a = ReadTorchFile(dir_a + "/ckpt/last.pt")->toGenericDict().at("student");
  const auto b = ReadTorchFile(dir_b + "/ckpt/last.pt")->toGenericDict().at("student");
  ASSERT_EQ(a.toGenericDict().size(), b.toGenericDict().size());
  for (const auto& entry : a.toGenericDict()) {
    EXPECT_TRUE(at::equal(entry.value().toTensor(), b.toGenericDict().at(entry.key()).toTensor()))
        << entry.key().toStringRef();
  }
}

at::Tensor LastStudentTensor(const std::string& dir, const std::string& name) {
  const auto student = ReadTorchFile(dir + "/ckpt/last.pt")->toGenericDict().at("student");
  return student.toGenericDict().at(name).toTensor();
}

int ExpectAuxModuleIsFile(const std::string& checkpoint, const std::string& prefix,
                          const std::string& file) {
  auto run = ReadTorchFile(checkpoint);
  auto own = ReadTorchFile(file);
  EXPECT_THAT(run, IsOk());
  EXPECT_THAT(own, IsOk());
  if (!run.ok() || !own.ok()) return 0;
  int compared = 0;
  for (const auto& entry : run->toGenericDict().at("auxiliary_modules").toGenericDict()) {
    const std::string& name = entry.key().toStringRef();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string key = name.substr(prefix.size());
    EXPECT_TRUE(at::equal(entry.value().toTensor(), own->toGenericDict().at(key).toTensor()))
        << name;
    ++compared;
  }
  return compared;
}

void BoxTest::SetUp() { at::set_num_threads(1); }

}  // namespace test
}  // namespace kd
