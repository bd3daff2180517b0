#include "distill/boxes/model_paths.h"

#include <cmath>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace {

using test::At;
using test::FixtureInputs;
using test::FixturePath;
using test::IValueNear;
using test::LoadExpected;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<std::string> Problems(const std::string& text) {
  absl::StatusOr<LoadedConfig> loaded = ParseConfig(text, "t.pbtxt");
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  std::vector<std::string> out;
  for (const ConfigProblem& problem : CheckModulePaths(*loaded, "")) {
    out.push_back(problem.ToString());
  }
  return out;
}

// fashion_cnn's modules: stem, layer1, layer2, head and their children. Columns
// counted by hand: line 4 "  student { forward_hooks { " is 28 characters, so
// module_path is at 29.
TEST(ModulePathsTest, EveryPathIsCheckedAgainstTheBuiltModels) {
  const std::string models =
      "teacher { native { key: \"fashion_cnn\" } }\n"
      "student { native { key: \"fashion_cnn\" kwargs { name: \"width\" "
      "integer: 4 } } }\n";
  EXPECT_THAT(
      Problems(models +
               R"pb(train {
                      student {
                        forward_hooks { module_path: "layer2" }
                        frozen_modules: "stem"
                      }
                      teacher { forward_hooks { module_path: "layer1.0" } }
                      optimizer { param_groups { module_path: "head" } }
                      criterion {
                        terms { inputs { source: STUDENT io: PARAMETER path: "head.2.weight" } }
                      }
                    })pb"),
      IsEmpty());
  // The expected columns are those of these lines as written.
  // clang-format off
  EXPECT_THAT(
      Problems(models +
               "train {\n"
               "  student { forward_hooks { module_path: \"layer3\" } frozen_modules: \"stme\" }\n"
               "  teacher { forward_hooks { module_path: \"layer2\" } }\n"
               "  optimizer { param_groups { model: TEACHER module_path: \"haed\" } }\n"
               "  criterion { terms { inputs { source: STUDENT io: PARAMETER path: \"head.weight\" } } }\n"
               "}\n"),
      ElementsAre(
          "t.pbtxt:4:29: no module \"layer3\" in this native model; did you mean \"layer1\" or \"layer2\"?",
          "t.pbtxt:4:53: no module \"stme\" in this native model; did you mean \"stem\"?",
          "t.pbtxt:6:45: no module \"haed\" in this native model; did you mean \"head\"?",
          "t.pbtxt:7:62: no parameter or buffer \"head.weight\" in the model; did you mean \"head.2.weight\"?"));
  // clang-format on
}

// A `sequential` stage model: its modules are checked against the model, every other path of
// the stage against the chain (element names with "." -> "__attr__").
TEST(ModulePathsTest, ASequentialStageNamesTheChainsPaths) {
  const std::string models =
      "student { native { key: \"fashion_cnn\" kwargs { name: \"width\" integer: 4 } } }\n";
  EXPECT_THAT(Problems(models + R"pb(train {
                                       student {
                                         sequential: [ "stem.0", "layer1" ]
                                         forward_hooks { module_path: "stem__attr__0" }
                                         frozen_modules: "layer1.1"
                                       }
                                       optimizer { param_groups { module_path: "layer1" } }
                                     })pb"),
              IsEmpty());
  // clang-format off
  EXPECT_THAT(
      Problems(models +
               "train {\n"
               "  student { sequential: \"stem\" sequential: \"layr1\" }\n"
               "}\n"
               "stages { name: \"b\" student { sequential: \"stem\" forward_hooks { module_path: \"layer1\" } } }\n"),
      ElementsAre(
          "t.pbtxt:3:32: no module \"layr1\" in this native model; did you mean \"layer1\"?",
          "t.pbtxt:5:65: no module \"layer1\" in this sequential model; valid: \"\" (root), stem, stem.0, stem.1, stem.2"));
  // clang-format on
}

TEST(ModulePathsTest, AModelThatCannotBeBuiltIsOneProblemAtItsField) {
  EXPECT_THAT(Problems("student { torchscript: \"/nonexistent/s.pt\" }\n"
                       "train { student { forward_hooks { module_path: \"x\" } } }\n"),
              ElementsAre(testing::StartsWith("t.pbtxt:1:1: student.torchscript: ")));
}

// small_cnn (convolutions with batch norms, scripted and traced) frozen and optimized: Python's
// eval-mode output, no parameters, no submodules; the loaded model itself is left as it was.
TEST(ModulePathsTest, OptimizeForInferenceKeepsTheOutputAndDropsTheModules) {
  const c10::IValue expected = LoadExpected("small_cnn");
  for (const char* file : {"small_cnn.pt", "small_cnn_traced.pt"}) {
    SCOPED_TRACE(file);
    ModelConfig config;
    config.set_torchscript(FixturePath(file));
    absl::StatusOr<std::unique_ptr<Model>> loaded = LoadModel(config, "", "teacher");
    ASSERT_THAT(loaded, IsOk());
    (*loaded)->SetTraining(true);  // optimized in eval mode whatever the model's mode
    absl::StatusOr<std::unique_ptr<Model>> optimized = OptimizeForInference(**loaded, "teacher");
    ASSERT_THAT(optimized, IsOk());
    EXPECT_THAT((*optimized)->Forward(FixtureInputs(expected)),
                IValueNear(At(expected, "output"), 1e-5));
    EXPECT_THAT((*optimized)->NamedParameters(), IsEmpty());
    EXPECT_EQ((*optimized)->NamedModules().size(), 1u);  // the root alone
    EXPECT_THAT((*optimized)->CheckModulePath("stem.0"), StatusIs(absl::StatusCode::kNotFound));
    (*optimized)->SetTraining(false);  // as a box does: the root keeps its flag
    EXPECT_FALSE((*optimized)->is_training());
    EXPECT_TRUE((*loaded)->is_training());
    EXPECT_FALSE((*loaded)->NamedParameters().empty());
  }
  ModelConfig native;
  native.mutable_native()->set_key("fashion_cnn");
  absl::StatusOr<std::unique_ptr<Model>> cnn = LoadModel(native, "", "teacher");
  ASSERT_THAT(cnn, IsOk());
  EXPECT_THAT(OptimizeForInference(**cnn, "teacher"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("teacher.optimize_for_inference: needs a TorchScript model")));
}

// Weights saved from a run that diverged are refused at load, naming the tensor, instead of
// showing as a NaN loss at the first step. (fashion_cnn's default width 16: layer1.0 is a 3x3
// convolution of 16 to 16 channels, 2304 weights.)
TEST(ModulePathsTest, NonFiniteWeightsAreRefusedAtLoad) {
  ModelConfig config;
  config.mutable_native()->set_key("fashion_cnn");
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(config, "", "teacher");
  ASSERT_THAT(model, IsOk());
  const std::string path = ::testing::TempDir() + "/diverged.pt";
  for (const auto& [name, tensor] : (*model)->NamedParameters()) {
    if (name == "layer1.0.weight") {
      at::NoGradGuard no_grad;
      tensor.view(-1)[3] = NAN;
      tensor.view(-1)[5] = INFINITY;
    }
  }
  ASSERT_THAT((*model)->SaveState(path), IsOk());
  config.set_src_ckpt(path);
  EXPECT_THAT(LoadModel(config, "", "teacher"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       absl::StrCat("teacher.src_ckpt: ", path,
                                    ": tensor \"layer1.0.weight\" holds 2 NaN or infinite values "
                                    "(of 2304): it was saved from a run that diverged; give "
                                    "weights from before it")));
}

}  // namespace
}  // namespace kd
