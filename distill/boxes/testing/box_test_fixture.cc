#include "distill/boxes/testing/box_test_fixture.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/status_macros.h"
#include "base/torch_file.h"
#include "distill/data/data_loader.h"
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

std::string WriteRuleTokens(const std::string& name, int64_t tokens, uint32_t seed,
                            const RuleTokens& rule) {
  const std::string path = TempPath(name);
  std::ofstream out(path, std::ios::binary);
  uint32_t state = seed;
  int64_t id = 0;
  for (int64_t i = 0; i < tokens; ++i) {
    if (i % rule.run == 0) {
      state = state * 1664525u + 1013904223u;
      id = (state >> 16) % rule.vocab;
    } else {
      id = (rule.mul * id + rule.add) % rule.vocab;
    }
    const uint16_t value = static_cast<uint16_t>(id);
    out.write(reinterpret_cast<const char*>(&value), sizeof(value));
  }
  return path;
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

void ExpectTeacherCacheServesSecondEpoch(const DistillConfig& config, const std::string& dir) {
  std::vector<TeacherCacheReport> reports;
  absl::StatusOr<std::unique_ptr<Box>> box =
      MakeBox(config, {.run_dir = dir, .on_epoch = [&](const EpochReport& r) {
                         if (r.teacher_cache) reports.push_back(*r.teacher_cache);
                       }});
  ASSERT_THAT(box, IsOk());
  ASSERT_THAT((*box)->Run(), IsOk());
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_TRUE(reports[0].on) << reports[0].off_reason;
  EXPECT_GT(reports[1].hits, 0);
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

std::string HintStage(const std::string& student_dst) {
  constexpr char kHint[] = R"pb(
    teacher {
      sequential: [ "stem", "layer1" ]
      forward_hooks { module_path: "layer1" requires_output: true }
    }
    student {
      sequential: [ "stem", "layer1" ]
      forward_hooks { module_path: "layer1" requires_output: true }
      auxiliary_modules {
        name: "regressor"
        key: "conv_connector"
        kwargs { name: "in_channels" integer: 4 }
        kwargs { name: "out_channels" integer: 8 }
        input { source: STUDENT path: "layer1" }
      }
      dst_ckpt: "$DST"
    }
    criterion {
      terms {
        key: "MSELoss"
        inputs { arg: "input" source: STUDENT path: "regressor" }
        inputs { arg: "target" source: TEACHER path: "layer1" }
      }
    }
  )pb";
  return absl::StrReplaceAll(kHint, {{"$DST", student_dst}});
}

std::string FitNetConfig(const std::string& student_dst) {
  return absl::StrCat(kImages, "stages {", Stage("hint", 2, HintStage(student_dst)), "} stages {",
                      Stage("kd", 1, kKd), "}");
}

void BoxTest::SetUp() { at::set_num_threads(1); }

absl::Status HandLoop(Box& box, int64_t end) {
  if (end < 0) end = box.num_epochs();
  for (int64_t epoch = box.start_epoch(); epoch < end; ++epoch) {
    KD_RETURN_IF_ERROR(box.PreEpoch(epoch));
    KD_ASSIGN_OR_RETURN(DataLoader * loader, box.TrainLoader());
    for (BatchStream batches(*loader); !batches.done();) {
      Batch batch = batches.Next();
      KD_RETURN_IF_ERROR(box.PreForward(batch));
      KD_ASSIGN_OR_RETURN(at::Tensor loss, box.Forward(batch));
      KD_RETURN_IF_ERROR(box.PostForward(loss));
    }
    KD_ASSIGN_OR_RETURN(auto metrics, box.Evaluate());
    KD_RETURN_IF_ERROR(box.PostEpoch(metrics));
  }
  return absl::OkStatus();
}

void ExpectHandLoopEqualsRun(const std::string& text, const std::string& name) {
  const DistillConfig config = Parse(text);
  const std::string run_dir = RunDir(name + "_run");
  auto run = MakeBox(config, {.run_dir = run_dir});
  ASSERT_THAT(run, IsOk());
  ASSERT_THAT((*run)->Run(), IsOk());
  auto hand = MakeBox(config, {.run_dir = RunDir(name + "_hand")});
  ASSERT_THAT(hand, IsOk());
  ASSERT_THAT(HandLoop(**hand), IsOk());
  int compared = 0;
  for (const auto& [param, tensor] : (*hand)->student().NamedParameters()) {
    EXPECT_TRUE(at::equal(tensor, LastStudentTensor(run_dir, param))) << name << ": " << param;
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

}  // namespace test
}  // namespace kd
