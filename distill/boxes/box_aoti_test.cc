// A teacher from an AOTInductor package (ModelConfig.aoti_package) in a box: the same run as
// with the TorchScript teacher of the same weights.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "distill/boxes/box.h"
#include "distill/boxes/testing/box_test_fixture.h"
#include "hooks/model.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using test::BoxTest;
using test::FixturePath;
using test::Parse;
using test::RunDir;
using test::Stage;
using ::testing::AllOf;
using ::testing::HasSubstr;

// small_cnn as teacher (its TorchScript file, or the AOTInductor package exported from the same
// weights with its layer2 input), a fashion_cnn student whose layer1 regresses onto it through
// a connector, beside KD on the logits.
constexpr char kConfig[] = R"pb(
  run { name: "t" seed: 5 }
  datasets {
    id: "train"
    key: "synthetic"
    kwargs { name: "num_samples" integer: 96 }
    kwargs { name: "num_classes" integer: 10 }
    kwargs { name: "seed" integer: 2 }
  }
  datasets {
    id: "val"
    key: "synthetic"
    kwargs { name: "num_samples" integer: 32 }
    kwargs { name: "num_classes" integer: 10 }
    kwargs { name: "seed" integer: 2 }
  }
  teacher { $TEACHER }
  student {
    native {
      key: "fashion_cnn"
      kwargs { name: "width" integer: 8 }
    }
  }
  evaluation { metrics { key: "accuracy" } }
)pb";

constexpr char kStage[] = R"pb(
  teacher { forward_hooks { module_path: "layer2" requires_input: true } }
  student {
    forward_hooks { module_path: "layer1" requires_output: true }
    auxiliary_modules {
      name: "connector" key: "conv_connector"
      kwargs { name: "in_channels" integer: 8 }
      kwargs { name: "out_channels" integer: 16 }
      input { path: "layer1" }
    }
  }
  criterion {
    terms {
      key: "KDLoss"
      kwargs { name: "temperature" number: 2 }
      kwargs { name: "alpha" number: 0.5 }
      inputs { arg: "student" source: STUDENT }
      inputs { arg: "teacher" source: TEACHER }
      inputs { arg: "targets" source: TARGETS }
    }
    terms {
      key: "MSELoss"
      inputs { arg: "input" source: STUDENT path: "connector" }
      inputs { arg: "target" source: TEACHER path: "layer2" io: INPUT }
    }
  }
)pb";

std::map<std::string, at::Tensor> TrainStudent(const std::string& teacher, const std::string& dir) {
  auto box = MakeBox(Parse(absl::StrCat(absl::StrReplaceAll(kConfig, {{"$TEACHER", teacher}}),
                                        "train {", Stage("kd", 1, kStage), "}")),
                     {.run_dir = dir});
  EXPECT_THAT(box, IsOk());
  if (!box.ok()) return {};
  EXPECT_THAT((*box)->Run(), IsOk());
  std::map<std::string, at::Tensor> params;
  for (const auto& [name, tensor] : (*box)->student().NamedParameters()) {
    params[name] = tensor.detach().clone();
  }
  return params;
}

// The done-when of the package teacher: a student distilled from it equals one distilled from
// the TorchScript teacher of the same weights, within 1e-5, after an epoch.
TEST_F(BoxTest, APackageTeacherDistilsAsItsTorchScriptTwin) {
  const auto from_package = TrainStudent(
      absl::StrCat("aoti_package: \"", FixturePath("small_cnn_aoti.pt2"), "\""), RunDir("aoti"));
  const auto from_script = TrainStudent(
      absl::StrCat("torchscript: \"", FixturePath("small_cnn.pt"), "\""), RunDir("script"));
  ASSERT_EQ(from_package.size(), from_script.size());
  ASSERT_FALSE(from_package.empty());
  for (const auto& [name, tensor] : from_script) {
    EXPECT_TRUE(at::allclose(from_package.at(name), tensor, 1e-5, 1e-5))
        << name << ": max difference "
        << (from_package.at(name) - tensor).abs().max().item<double>();
  }
}

// A hook the package was not exported with fails the box's making, naming what was exported and
// the re-export.
TEST_F(BoxTest, APackageTeacherHookedWhereItWasNotExported) {
  std::string stage = kStage;
  stage.replace(stage.find("module_path: \"layer2\""), std::string("module_path: \"layer2\"").size(),
                "module_path: \"layer1\"");
  stage.replace(stage.find("path: \"layer2\" io: INPUT"),
                std::string("path: \"layer2\" io: INPUT").size(), "path: \"layer1\" io: INPUT");
  auto box = MakeBox(
      Parse(absl::StrCat(
          absl::StrReplaceAll(kConfig, {{"$TEACHER", absl::StrCat("aoti_package: \"",
                                                                  FixturePath("small_cnn_aoti.pt2"),
                                                                  "\"")}}),
          "train {", Stage("kd", 1, stage), "}")),
      {.run_dir = RunDir("aoti_unexported")});
  EXPECT_THAT(box, StatusIs(absl::StatusCode::kInvalidArgument,
                            AllOf(HasSubstr("teacher: forward_hooks[0] (\"layer1\")"),
                                  HasSubstr("exported: \"layer1.0.relu\", \"layer2\""),
                                  HasSubstr("tools/export_teacher.py --hooks=layer1:output"))));
}

}  // namespace
}  // namespace kd
