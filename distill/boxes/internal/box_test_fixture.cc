#include "distill/boxes/internal/box_test_fixture.h"

#include <filesystem>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "absl/strings/str_cat.h"
#include "base/torch_file.h"
#include "google/protobuf/text_format.h"
#include "testing/fixtures.h"

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

void BoxTest::SetUp() { at::set_num_threads(1); }

}  // namespace test
}  // namespace kd
