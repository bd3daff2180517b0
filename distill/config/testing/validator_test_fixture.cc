#include "distill/config/testing/validator_test_fixture.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/List.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/ivalue_util.h"
#include "base/registry.h"
#include "distill/config/config_loader.h"
#include "distill/config/plugin_kinds.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace test {
namespace {

// Stand-ins for the registries of later parts of libkd (losses, datasets, ...), of the kinds
// configs use, with a few keys and the kwargs they declare.
Registry<int>& Kind(absl::string_view kind);

#define KD_TEST_PLUGIN(kind, ...) KD_REGISTER(Kind(kind), __VA_ARGS__)

Registry<int>& Kind(absl::string_view kind) {
  static auto* const registries = new std::map<std::string, Registry<int>*, std::less<>>;
  auto it = registries->find(kind);
  if (it == registries->end()) {
    it = registries->emplace(kind, NewGlobalRegistry<int>(std::string(kind))).first;
  }
  return *it->second;
}

KD_TEST_PLUGIN(kLossKind, "KDLoss", 0,
               {{"temperature", KwargType::kNumber, ""}, {"alpha", KwargType::kNumber, ""}});
KD_TEST_PLUGIN(kLossKind, "CrossEntropyLoss", 0, {{"reduction", KwargType::kString, ""}});
KD_TEST_PLUGIN(kLossKind, "MSELoss", 0, kAnyKwargs);
KD_TEST_PLUGIN(kDatasetKind, "fashion_mnist", 0,
               {{"root", KwargType::kString, ""}, {"split", KwargType::kString, ""}});
KD_TEST_PLUGIN(kModelKind, "fashion_cnn", 0, {{"width", KwargType::kInteger, ""}});
KD_TEST_PLUGIN(kOptimizerKind, "SGD", 0,
               {{"lr", KwargType::kNumber, ""}, {"momentum", KwargType::kNumber, ""}});
KD_TEST_PLUGIN(kSchedulerKind, "MultiStepLR", 0,
               {{"milestones", KwargType::kIntegerList, ""}, {"gamma", KwargType::kNumber, ""}});
KD_TEST_PLUGIN(kMetricKind, "accuracy", 0, {{"top_k", KwargType::kInteger, ""}});
// A plugin with a contract: ranges, choices and a required kwarg in its specs, and a check of
// its own for what no single spec can say.
KD_TEST_PLUGIN(
    kMetricKind, "topk_accuracy", 0,
    {{.name = "ks", .type = KwargType::kIntegerList, .min = 1, .required = true},
     {.name = "weight", .type = KwargType::kNumber, .min = 0, .max = 1, .min_exclusive = true},
     {.name = "reduction", .type = KwargType::kString, .choices = {"mean", "sum"}}},
    [](const KwargsView& view) {
      const c10::List<int64_t> ks = view.kwargs.at("ks").toIntList();
      for (size_t i = 1; i < ks.size(); ++i) {
        if (ks[i] <= ks[i - 1]) {
          return absl::InvalidArgumentError("ks must increase, got " + std::to_string(ks[i - 1]) +
                                            " then " + std::to_string(ks[i]));
        }
      }
      return absl::OkStatus();
    });
KD_TEST_PLUGIN(kSamplerKind, "weighted", 0, kAnyKwargs);
KD_TEST_PLUGIN(kDatasetWrapperKind, "SSKDDatasetWrapper", 0, {});
KD_TEST_PLUGIN(kAuxiliaryModuleKind, "conv_connector", 0, kAnyKwargs);

}  // namespace

const Lines kBase = {
    R"(run { name: "t" device: "cpu" })",  // 1
    R"(datasets { id: "train" key: "fashion_mnist" kwargs { name: "split" str: "train" } })",
    R"(datasets { id: "val" key: "fashion_mnist" subset { start: 55000 } })",
    R"(teacher { torchscript: "teacher.pt" })",  // 4
    R"(student { native { key: "fashion_cnn" kwargs { name: "width" integer: 4 } } })",
    R"(train {)",                                                                   // 6
    R"(  num_epochs: 2)",                                                           // 7
    R"(  train_data_loader { dataset_id: "train" batch_size: 32 shuffle: true })",  // 8
    R"(  val_data_loader { dataset_id: "val" batch_size: 64 })",                    // 9
    R"(  teacher { forward_hooks { module_path: "layer2" requires_output: true } })",
    R"(  student { forward_hooks { module_path: "layer2" requires_output: true } })",
    R"(  optimizer { key: "SGD" kwargs { name: "lr" number: 0.1 } })",  // 12
    R"(  scheduler { key: "MultiStepLR" kwargs { name: "milestones" integers { values: [1] } } })",
    R"(  criterion {)",                                                   // 14
    R"(    terms {)",                                                     // 15
    R"(      name: "kd")",                                                // 16
    R"(      key: "KDLoss")",                                             // 17
    R"(      kwargs { name: "temperature" number: 4 })",                  // 18
    R"(      inputs { arg: "student" source: STUDENT })",                 // 19
    R"(      inputs { arg: "teacher" source: TEACHER })",                 // 20
    R"(      inputs { arg: "targets" source: TARGETS })",                 // 21
    R"(    })",                                                           // 22
    R"(    terms {)",                                                     // 23
    R"(      name: "hint" key: "MSELoss")",                               // 24
    R"(      inputs { arg: "student" source: STUDENT path: "layer2" })",  // 25
    R"(      inputs { arg: "teacher" source: TEACHER path: "layer2" })",  // 26
    R"(    })",                                                           // 27
    R"(  })",                                                             // 28
    R"(})",                                                               // 29
    R"(evaluation { metrics { key: "accuracy" } })",                      // 30
};

Lines Replace(Lines lines, int n, const Lines& with) {
  lines.erase(lines.begin() + (n - 1));
  lines.insert(lines.begin() + (n - 1), with.begin(), with.end());
  return lines;
}

Lines Insert(Lines lines, int n, const Lines& more) {
  lines.insert(lines.begin() + (n - 1), more.begin(), more.end());
  return lines;
}

std::string At(const Lines& lines, int n, const std::string& needle, int occurrence) {
  size_t column = lines[n - 1].find(needle);
  for (int i = 1; i < occurrence && column != std::string::npos; ++i) {
    column = lines[n - 1].find(needle, column + 1);
  }
  EXPECT_NE(column, std::string::npos) << needle << " not in line " << n;
  return absl::StrCat("t.pbtxt:", n, ":", column + 1, ": ");
}

std::vector<std::string> Validate(const Lines& lines, const ValidateOptions& options) {
  absl::StatusOr<LoadedConfig> loaded = ParseConfig(absl::StrJoin(lines, "\n"), "t.pbtxt");
  EXPECT_THAT(loaded, IsOk());
  if (!loaded.ok()) return {std::string(loaded.status().message())};
  std::vector<std::string> out;
  for (const ConfigProblem& problem : ValidateConfig(*loaded, options)) {
    out.push_back(problem.ToString());
  }
  return out;
}

}  // namespace test
}  // namespace kd
