#include "capture/module_capture_engine.h"

#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/optim/adam.h>

#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hooks/native_model.h"
#include "hooks/torchscript_model.h"
#include "testing/small_cnn.h"
#include "testing/fixture_models.h"
#include "testing/fixtures.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace {

using ::kd::test::IValueNear;

using ::kd::test::AllClose;
using ::kd::test::At;
using ::kd::test::FixtureInputs;
using ::kd::test::FixturePath;
using ::kd::test::LastPythonHook;
using ::kd::test::LoadExpected;
using ::kd::test::SmallCnnModel;
using ::kd::test::TorchScriptFixture;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::vector<std::string> kPaths = {"stem", "layer1.1.conv2", "layer2.0", "fc"};

class ModuleCaptureEngineTest : public ::testing::TestWithParam<test::ModelKind> {};

TEST_P(ModuleCaptureEngineTest, InputsAndOutputsEqualPython) {
  for (bool truncate : {false, true}) {
    SCOPED_TRACE(truncate ? "truncated" : "full");
    std::unique_ptr<Model> model = SmallCnnModel(GetParam());
    const c10::IValue expected = LoadExpected("small_cnn");
    ModuleCaptureEngine engine(*model, kPaths, {.auto_truncate = truncate});
    ASSERT_THAT(engine.Register(), IsOk());
    auto out = engine.Forward(FixtureInputs(expected));
    ASSERT_THAT(out, IsOk());
    // fc is the last module: a truncated run has nothing left to skip but the return value.
    if (!truncate) {
      EXPECT_THAT(*out, IValueNear(At(expected, "output"), 1e-5));
    }
    for (size_t id = 0; id < kPaths.size(); ++id) {
      SCOPED_TRACE(kPaths[id]);
      auto captured = engine.GetCaptured(static_cast<int>(id));
      ASSERT_THAT(captured, IsOk());
      ASSERT_EQ(captured->args.size(), 1u);
      EXPECT_TRUE(captured->kwargs.empty());
      EXPECT_THAT(captured->args[0], IValueNear(LastPythonHook(expected, kPaths[id], "input"), 1e-5));
      EXPECT_THAT(captured->output, IValueNear(LastPythonHook(expected, kPaths[id], "output"), 1e-5));
    }
  }
}

TEST_P(ModuleCaptureEngineTest, TruncatedRunCapturesWhatFullRunCapturesAndSkipsTheRest) {
  // Training mode: BatchNorm updates its running statistics when it runs, which shows which
  // modules ran. The cut after layer1 must leave layer2's statistics as they were.
  std::unique_ptr<Model> full_model = SmallCnnModel(GetParam());
  std::unique_ptr<Model> cut_model = SmallCnnModel(GetParam());
  full_model->SetTraining(true);
  cut_model->SetTraining(true);
  auto buffer = [](Model& m, const std::string& name) {
    for (auto& [n, t] : m.NamedBuffers()) {
      if (n == name) return t.clone();
    }
    return at::Tensor();
  };
  const at::Tensor layer1_before = buffer(*cut_model, "layer1.1.bn2.running_mean");
  const at::Tensor layer2_before = buffer(*cut_model, "layer2.0.bn1.running_mean");

  const std::vector<std::string> paths = {"stem", "layer1"};
  ModuleCaptureEngine full(*full_model, paths);
  ModuleCaptureEngine cut(*cut_model, paths, {.auto_truncate = true});
  ASSERT_THAT(full.Register(), IsOk());
  ASSERT_THAT(cut.Register(), IsOk());
  const at::Tensor x = at::randn({4, 1, 28, 28});
  auto full_out = full.Forward({x});
  auto cut_out = cut.Forward({x});
  ASSERT_THAT(full_out, IsOk());
  ASSERT_THAT(cut_out, IsOk());
  EXPECT_EQ(full_out->toTensor().sizes(), (std::vector<int64_t>{4, 10}));
  EXPECT_TRUE(cut_out->isNone());  // nothing after layer1 ran, not even fc
  for (int id : {0, 1}) {
    EXPECT_THAT(cut.GetCaptured(id)->output, IValueNear(full.GetCaptured(id)->output, 1e-6));
    EXPECT_THAT(cut.GetCaptured(id)->args[0], IValueNear(full.GetCaptured(id)->args[0], 1e-6));
  }
  EXPECT_FALSE(at::equal(buffer(*cut_model, "layer1.1.bn2.running_mean"), layer1_before));
  EXPECT_TRUE(at::equal(buffer(*cut_model, "layer2.0.bn1.running_mean"), layer2_before));
  EXPECT_FALSE(at::equal(buffer(*full_model, "layer2.0.bn1.running_mean"), layer2_before));
}

TEST_P(ModuleCaptureEngineTest, DetachedOutputsHaveNoGradFnUndetachedOnesBackpropagate) {
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  const at::Tensor x = at::randn({2, 1, 28, 28});
  {
    ModuleCaptureEngine engine(*model, {"layer1"});
    ASSERT_THAT(engine.Register(), IsOk());
    ASSERT_THAT(engine.Forward({x}), IsOk());
    auto out = engine.PopCapturedOutput(0);
    ASSERT_THAT(out, IsOk());
    EXPECT_FALSE(out->toTensor().requires_grad());
    EXPECT_FALSE(out->toTensor().grad_fn());
  }
  ModuleCaptureEngine engine(*model, {"layer1"}, {.detach_outputs = false});
  ASSERT_THAT(engine.Register(), IsOk());
  ASSERT_THAT(engine.Forward({x}), IsOk());
  auto out = engine.PopCapturedOutput(0);
  ASSERT_THAT(out, IsOk());
  ASSERT_TRUE(out->toTensor().grad_fn());
  out->toTensor().sum().backward();
  for (auto& [name, p] : model->NamedParameters()) {
    const bool before_layer1_end = name.rfind("stem.", 0) == 0 || name.rfind("layer1.", 0) == 0;
    EXPECT_EQ(p.grad().defined() && p.grad().abs().sum().item<double>() > 0, before_layer1_end)
        << name;
  }
}

TEST_P(ModuleCaptureEngineTest, DeepCopiedArgsIgnoreLaterInPlaceChanges) {
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  const at::Tensor x = at::randn({1, 1, 28, 28});
  const at::Tensor original = x.clone();
  ModuleCaptureEngine shared(*model, {"stem"}, {.values = HookValues::kReferences});
  ModuleCaptureEngine copied(*model, {"stem"}, {.deepcopy_captured_args_and_kwargs = true});
  ASSERT_THAT(shared.Register(), IsOk());
  ASSERT_THAT(copied.Register(), IsOk());
  ASSERT_THAT(shared.Forward({x}), IsOk());  // both engines capture this forward
  x.add_(1.0);
  EXPECT_THAT(shared.GetCaptured(0)->args[0], IValueNear(original + 1.0, 0));  // shares memory
  EXPECT_THAT(copied.GetCaptured(0)->args[0], IValueNear(original, 0));        // a copy
}

TEST_P(ModuleCaptureEngineTest, CallbackOrderAndArguments) {
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  std::vector<int> order;
  std::vector<c10::IValue> outputs;
  // Ids follow modules_to_capture; calls follow the forward: stem (id 1) runs before fc (id 0).
  ModuleCaptureEngine engine(
      *model, std::vector<std::string>{"fc", "stem"},
      {.output_callback = [&](int id, const std::vector<c10::IValue>& args,
                              const c10::IValue& output) {
        order.push_back(id);
        EXPECT_EQ(args.size(), 1u);
        outputs.push_back(output);
      }});
  ASSERT_THAT(engine.Register(), IsOk());
  const at::Tensor x = at::randn({2, 1, 28, 28});
  auto y = engine.Forward({x});
  ASSERT_THAT(y, IsOk());
  EXPECT_THAT(order, ElementsAre(1, 0));
  EXPECT_THAT(outputs[1], IValueNear(*y, 0));
  EXPECT_EQ(outputs[0].toTensor().sizes(), (std::vector<int64_t>{2, 8, 28, 28}));
}

TEST_P(ModuleCaptureEngineTest, RegistrationRules) {
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  ModuleCaptureEngine engine(*model, {"fc"});
  EXPECT_THAT(engine.Forward({at::randn({1, 1, 28, 28})}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("before Register()")));
  ASSERT_THAT(engine.Register(), IsOk());
  EXPECT_THAT(engine.Register(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("registered already")));
  engine.Deregister();
  EXPECT_FALSE(engine.is_registered());
  model->Forward({at::randn({1, 1, 28, 28})});
  EXPECT_THAT(engine.GetCaptured(0), StatusIs(absl::StatusCode::kNotFound));
  ModuleCaptureEngine unknown(*model, std::vector<std::string>{"fc", "layer9"});
  EXPECT_THAT(unknown.Register(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("did you mean \"layer1\" or \"layer2\"?")));
  EXPECT_FALSE(unknown.is_registered());
}

TEST_P(ModuleCaptureEngineTest, InputsCapturedTwiceIsAnErrorNamingTheModule) {
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  ModuleCaptureEngine engine(*model, {"fc", "layer1.0.relu"});
  ASSERT_THAT(engine.Register(), IsOk());
  // relu runs twice in one forward.
  EXPECT_THAT(engine.Forward({at::randn({1, 1, 28, 28})}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("module 1 (\"layer1.0.relu\") ran twice in one forward, and "
                                 "its inputs are captured once per forward")));
  engine.Deregister();
  ModuleCaptureEngine once(*model, {"fc"});
  ASSERT_THAT(once.Register(), IsOk());
  ASSERT_THAT(once.Forward({at::randn({1, 1, 28, 28})}), IsOk());
  EXPECT_THAT(once.Forward({at::randn({1, 1, 28, 28})}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("module 0 (\"fc\") ran again before its captured inputs were "
                                 "popped or cleared")));
  ASSERT_THAT(once.PopCapturedInputs(0), IsOk());
  EXPECT_THAT(once.Forward({at::randn({1, 1, 28, 28})}), IsOk());
  once.ClearCaptured();
  EXPECT_THAT(once.Forward({at::randn({1, 1, 28, 28})}), IsOk());
}

TEST_P(ModuleCaptureEngineTest, MissingIdsAreNotFoundNamingWhatWasCaptured) {
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  ModuleCaptureEngine engine(*model, {"stem", "fc"}, {.capture_inputs = false});
  ASSERT_THAT(engine.Register(), IsOk());
  ASSERT_THAT(engine.Forward({at::randn({1, 1, 28, 28})}), IsOk());
  EXPECT_THAT(engine.GetCaptured(5),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("no module id 5: ids are 0..1 (captured: 0 (output), 1 (output))")));
  EXPECT_THAT(engine.PopCapturedInputs(0),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("no inputs captured for module 0 (\"stem\") (capture_inputs is "
                                 "false)")));
  ASSERT_THAT(engine.PopCapturedOutput(1), IsOk());
  EXPECT_THAT(engine.PopCapturedOutput(1),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("no output captured for module 1 (\"fc\"); captured: 0 (output)")));
  EXPECT_TRUE(engine.GetCaptured(0)->args.empty());
}

TEST_P(ModuleCaptureEngineTest, ScopeRegistersAndDeregisters) {
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  ModuleCaptureEngine engine(*model, {"fc"});
  {
    ModuleCaptureEngine::Scope scope(engine);
    ASSERT_THAT(scope.status(), IsOk());
    EXPECT_TRUE(engine.is_registered());
  }
  EXPECT_FALSE(engine.is_registered());
}

INSTANTIATE_TEST_SUITE_P(BothKinds, ModuleCaptureEngineTest, test::kBothKinds,
                         test::ModelKindName);

TEST(ModuleCaptureEngineTorchScriptTest, CutsNeverChangeCapturedValues) {
  std::unique_ptr<Model> model = TorchScriptFixture("inplace");
  const c10::IValue expected = LoadExpected("inplace");
  // After b, forward doubles b's output in place; after c, the module bump changes c's output.
  // Captured values are what the modules returned (Python's hooks cloned them), cut or not.
  for (const std::string path : {"b", "c"}) {
    for (bool truncate : {false, true}) {
      ModuleCaptureEngine engine(*model, {path}, {.auto_truncate = truncate});
      ASSERT_THAT(engine.Register(), IsOk());
      auto out = engine.Forward(FixtureInputs(expected));
      ASSERT_THAT(out, IsOk());
      EXPECT_EQ(out->isNone(), truncate);
      EXPECT_THAT(engine.GetCaptured(0)->output,
                  IValueNear(LastPythonHook(expected, path, "output"), 1e-6))
          << path << (truncate ? " cut" : " uncut");
    }
  }
  {
    // With references (silverspoon-kd's semantics) a cut that skips bump's write is refused.
    ModuleCaptureEngine engine(*model, {"c"},
                               {.auto_truncate = true, .values = HookValues::kReferences});
    ASSERT_THAT(engine.Register(), IsOk());
    EXPECT_THAT(engine.Forward(FixtureInputs(expected)),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("cannot truncate the forward after c: bump.forward() "
                                   "modifies the output of \"c\" in place after the cut")));
  }
  // After a nothing touches a's input or output: the cut is allowed, and equals Python.
  ModuleCaptureEngine engine(*model, {"a"}, {.auto_truncate = true});
  ASSERT_THAT(engine.Register(), IsOk());
  auto out = engine.Forward(FixtureInputs(expected));
  ASSERT_THAT(out, IsOk());
  EXPECT_TRUE(out->isNone());
  EXPECT_THAT(engine.GetCaptured(0)->output, IValueNear(LastPythonHook(expected, "a", "output"), 1e-5));
}

// A BasicBlock after an in-place Hardswish: every captured output equals what Python's hook
// cloned at call time, with and without the cut.
TEST(ModuleCaptureEngineTorchScriptTest, ResidualBlockValuesCutAndUncutEqualPython) {
  std::unique_ptr<Model> model = TorchScriptFixture("resnet_tiny");
  const c10::IValue expected = LoadExpected("resnet_tiny");
  for (const std::string path : {"stem", "act", "block.conv1", "block.bn1", "block.conv2",
                                 "block.bn2", "block", "head"}) {
    for (bool truncate : {false, true}) {
      ModuleCaptureEngine engine(*model, {path}, {.auto_truncate = truncate});
      ASSERT_THAT(engine.Register(), IsOk());
      ASSERT_THAT(engine.Forward(FixtureInputs(expected)), IsOk());
      EXPECT_THAT(engine.GetCaptured(0)->output,
                  IValueNear(LastPythonHook(expected, path, "output"), 1e-6))
          << path << (truncate ? " cut" : " uncut");
      EXPECT_THAT(engine.GetCaptured(0)->args[0],
                  IValueNear(LastPythonHook(expected, path, "input"), 1e-6))
          << path << (truncate ? " cut" : " uncut");
    }
  }
}

TEST(ModuleCaptureEngineNativeTest, ModulesByHandle) {
  test::SmallCnn net;
  std::unique_ptr<Model> model = MakeNativeModel(net.ptr());
  model->SetTraining(false);
  ModuleCaptureEngine engine(*model, ModuleHandles{{net->layer1.ptr(), net->fc.ptr()}});
  EXPECT_THAT(engine.module_paths(), ElementsAre("layer1", "fc"));
  ASSERT_THAT(engine.Register(), IsOk());
  auto y = engine.Forward({at::randn({1, 1, 28, 28})});
  ASSERT_THAT(y, IsOk());
  EXPECT_THAT(engine.GetCaptured(1)->output, IValueNear(*y, 0));

  test::SmallCnn other;
  ModuleCaptureEngine stranger(*model, ModuleHandles{{other->fc.ptr()}});
  EXPECT_THAT(stranger.Register(),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("module 0 (Linear) is not a module of this native model")));
}

TEST(ModuleCaptureEngineTorchScriptTest, ModulesByHandle) {
  std::unique_ptr<Model> model = TorchScriptFixture("small_cnn");
  const torch::jit::Module& root = *GetTorchScriptModule(*model);
  const torch::jit::Module layer1 = root.attr("layer1").toModule();
  ModuleCaptureEngine engine(*model, ScriptModuleHandles{{layer1, root.attr("fc").toModule()}});
  EXPECT_THAT(engine.module_paths(), ElementsAre("layer1", "fc"));
  ASSERT_THAT(engine.Register(), IsOk());
  auto y = engine.Forward({at::randn({1, 1, 28, 28})});
  ASSERT_THAT(y, IsOk());
  EXPECT_THAT(engine.GetCaptured(1)->output, IValueNear(*y, 0));

  std::unique_ptr<Model> other = TorchScriptFixture("small_cnn");
  ModuleCaptureEngine stranger(
      *model, ScriptModuleHandles{{GetTorchScriptModule(*other)->attr("fc").toModule()}});
  EXPECT_THAT(stranger.Register(),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("module 0 (Linear) is not a module of this torchscript model")));
}

// Blockwise distillation: the teacher's layer1.1 block, captured with its input, teaches a
// fresh native block of the same shape; the student sees exactly the teacher block's input.
TEST(ModuleCaptureEngineBlockwiseTest, StudentBlockLearnsFromTeacherBlockInput) {
  at::manual_seed(0);
  std::unique_ptr<Model> teacher = TorchScriptFixture("small_cnn");
  ModuleCaptureEngine engine(*teacher, {"layer1.1"}, {.auto_truncate = true});
  ASSERT_THAT(engine.Register(), IsOk());
  test::Block student(8);
  torch::optim::Adam optimizer(student->parameters(), torch::optim::AdamOptions(1e-2));
  std::vector<double> losses;
  for (int step = 0; step < 30; ++step) {
    ASSERT_THAT(engine.Forward({at::randn({8, 1, 28, 28})}), IsOk());
    auto inputs = engine.PopCapturedInputs(0);
    auto target = engine.PopCapturedOutput(0);
    ASSERT_THAT(inputs, IsOk());
    ASSERT_THAT(target, IsOk());
    const at::Tensor prediction = student->forward(inputs->first[0].toTensor());
    const at::Tensor loss = at::mse_loss(prediction, target->toTensor());
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    losses.push_back(loss.item<double>());
  }
  const double first = (losses[0] + losses[1] + losses[2]) / 3;
  const double last = (losses[27] + losses[28] + losses[29]) / 3;
  EXPECT_LT(last, 0.5 * first) << "first " << first << ", last " << last;
}

}  // namespace
}  // namespace kd
