#include "hooks/native_model.h"

#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hooks/hook_point.h"
#include "testing/fixture_models.h"
#include "testing/fixtures.h"
#include "testing/small_cnn.h"
#include "testing/status_matchers.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace {

using ::kd::test::AllClose;
using ::kd::test::At;
using ::kd::test::FixtureInputs;
using ::kd::test::FixturePath;
using ::kd::test::IValueNear;
using ::kd::test::LoadExpected;
using ::kd::test::SmallCnnModel;
using ::kd::test::TapRecorder;
using ::testing::HasSubstr;

struct TwiceImpl : torch::nn::Module {
  at::Tensor forward(at::Tensor x) { return x * 2; }
};
TORCH_MODULE(Twice);

TEST(NativeHookTest, TheHandleRemovesTheHookAndMayOutliveTheModule) {
  HookHandle outlives;
  int calls = 0;
  {
    Twice twice;
    HookHandle handle =
        AddNativeHook(*twice, [&](const std::vector<c10::IValue>& args, const c10::IValue& output) {
          ++calls;
          EXPECT_THAT(output, IValueNear(args[0].toTensor() * 2, 0));
        });
    EXPECT_TRUE(handle.active());
    Call(twice, at::ones({1}));
    EXPECT_EQ(calls, 1);
    twice->forward(at::ones({1}));  // not through a hook point: the hook does not run
    EXPECT_EQ(calls, 1);
    handle.Reset();
    EXPECT_FALSE(handle.active());
    Call(twice, at::ones({1}));
    EXPECT_EQ(calls, 1);
    outlives = AddNativeHook(*twice, [&](const std::vector<c10::IValue>&, const c10::IValue&) {});
  }
  outlives.Reset();  // the module is gone: removal is a no-op
  EXPECT_EQ(hooks_internal::num_hooks.load(), 0);
}

TEST(NativeModelTest, PathsAndParameterCountEqualPython) {
  std::unique_ptr<Model> model = MakeNativeModel(test::SmallCnn().ptr());
  const c10::IValue expected = LoadExpected("small_cnn");
  std::vector<std::string> actual_paths, expected_paths;
  for (const ModuleInfo& m : model->NamedModules()) actual_paths.push_back(m.path);
  for (const c10::IValue& m : At(expected, "modules").toTupleRef().elements()) {
    const std::string& entry = m.toStringRef();
    expected_paths.push_back(entry.substr(0, entry.find('|')));
  }
  EXPECT_EQ(actual_paths, expected_paths);
  EXPECT_EQ(model->NumParameters(), At(expected, "num_params").toInt());
  EXPECT_EQ(model->kind(), "native");
}

TEST(NativeModelTest, TypeNamesAsPythonPrintsThem) {
  std::unique_ptr<Model> model = MakeNativeModel(test::SmallCnn().ptr());
  std::map<std::string, std::string> types;
  for (const ModuleInfo& m : model->NamedModules()) types[m.path] = m.type;
  EXPECT_EQ(types[""], "SmallCnn");
  EXPECT_EQ(types["stem.0"], "Conv2d");
  EXPECT_EQ(types["stem.1"], "BatchNorm2d");
  EXPECT_EQ(types["layer1.0"], "Block");
  EXPECT_EQ(types["fc"], "Linear");
}

TEST(NativeModelTest, ForwardWithPythonWeightsEqualsPython) {
  std::unique_ptr<Model> model = SmallCnnModel(test::ModelKind::kNative);
  const c10::IValue expected = LoadExpected("small_cnn");
  EXPECT_THAT(model->Forward(FixtureInputs(expected)), IValueNear(At(expected, "output"), 1e-5));
}

TEST(NativeModelTest, TapsSeeWhatPythonHooksSaw) {
  std::unique_ptr<Model> model = SmallCnnModel(test::ModelKind::kNative);
  const c10::IValue expected = LoadExpected("small_cnn");
  const auto& hooks = At(expected, "hooks").toGenericDict();
  std::vector<std::unique_ptr<TapRecorder>> recorders;
  std::vector<HookHandle> handles;
  for (const auto& entry : hooks) {
    recorders.push_back(std::make_unique<TapRecorder>());
    auto handle = model->AddHook(entry.key().toStringRef(), recorders.back()->Fn());
    ASSERT_THAT(handle, IsOk());
    handles.push_back(*std::move(handle));
  }
  model->Forward(FixtureInputs(expected));
  EXPECT_THAT(model->CheckHooksFired(), IsOk());
  size_t i = 0;
  for (const auto& entry : hooks) {
    SCOPED_TRACE(entry.key().toStringRef());
    const TapRecorder& r = *recorders[i++];
    EXPECT_THAT(c10::ivalue::Tuple::create(r.inputs), IValueNear(At(entry.value(), "input"), 1e-5));
    EXPECT_THAT(c10::ivalue::Tuple::create(r.outputs),
                IValueNear(At(entry.value(), "output"), 1e-5));
  }
}

TEST(NativeModelTest, NestedTensorSequentialsKeepTorchsPathsAndHookEveryLevel) {
  // torch.nn.Sequential(Sequential(Linear(4, 3), Twice), Linear(3, 2)): "0", "0.0", "0.1", "1".
  torch::nn::Linear first(4, 3), last(3, 2);
  Twice twice;
  HookedTensorSequential inner(first, twice);
  std::unique_ptr<Model> model = MakeNativeModel(HookedTensorSequential(inner, last).ptr());
  std::vector<std::string> params;
  for (const auto& [name, t] : model->NamedParameters()) params.push_back(name);
  EXPECT_THAT(params, ::testing::ElementsAre("0.0.weight", "0.0.bias", "1.weight", "1.bias"));
  std::vector<std::unique_ptr<TapRecorder>> recorders;
  std::vector<HookHandle> handles;
  for (const char* path : {"0", "0.0", "0.1", "1"}) {
    recorders.push_back(std::make_unique<TapRecorder>());
    auto handle = model->AddHook(path, recorders.back()->Fn());
    ASSERT_THAT(handle, IsOk());
    handles.push_back(*std::move(handle));
  }
  const at::Tensor x = at::randn({5, 4});
  const at::Tensor y = model->Forward({x}).toTensor();
  EXPECT_THAT(model->CheckHooksFired(), IsOk());
  const at::Tensor hidden = 2 * (at::matmul(x, first->weight.t()) + first->bias);
  EXPECT_TRUE(AllClose(recorders[0]->outputs.at(0).toTensor(), hidden, 1e-6));
  EXPECT_TRUE(AllClose(recorders[2]->inputs.at(0).toTensor(), hidden / 2, 1e-6));
  EXPECT_TRUE(AllClose(recorders[3]->inputs.at(0).toTensor(), hidden, 1e-6));
  EXPECT_TRUE(AllClose(y, at::matmul(hidden, last->weight.t()) + last->bias, 1e-6));
}

TEST(NativeModelTest, BypassedHookPointIsReportedWithTheRule) {
  std::unique_ptr<Model> model = MakeNativeModel(test::DirectCallNet().ptr());
  TapRecorder lin, act;
  auto lin_tap = model->AddHook("lin", lin.Fn());
  auto act_tap = model->AddHook("act", act.Fn());
  ASSERT_THAT(lin_tap, IsOk());
  ASSERT_THAT(act_tap, IsOk());
  model->Forward({at::ones({2, 4})});
  EXPECT_EQ(act.outputs.size(), 1u);
  EXPECT_TRUE(lin.outputs.empty());
  EXPECT_THAT(model->CheckHooksFired(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("hooked module(s) \"lin\" (Linear) never ran through a "
                                       "hook point during forward"),
                             HasSubstr("kd::Call(child, ...)"))));
}

TEST(NativeModelTest, RemovingTapsRemovesHookPoints) {
  std::unique_ptr<Model> model = SmallCnnModel(test::ModelKind::kNative);
  const int64_t before = hooks_internal::num_hooks.load();
  TapRecorder r;
  {
    auto tap = model->AddHook("layer1.0.relu", r.Fn());
    ASSERT_THAT(tap, IsOk());
    EXPECT_EQ(hooks_internal::num_hooks.load(), before + 1);
    model->Forward({at::zeros({1, 1, 28, 28})});
    EXPECT_EQ(r.outputs.size(), 2u);  // relu runs twice per block
  }
  EXPECT_EQ(hooks_internal::num_hooks.load(), before);
  model->Forward({at::zeros({1, 1, 28, 28})});
  EXPECT_EQ(r.outputs.size(), 2u);
}

TEST(NativeModelTest, TapHandleMayOutliveModel) {
  TapRecorder r;
  HookHandle tap;
  {
    std::unique_ptr<Model> model = MakeNativeModel(test::SmallCnn().ptr());
    auto added = model->AddHook("fc", r.Fn());
    ASSERT_THAT(added, IsOk());
    tap = *std::move(added);
  }
  EXPECT_EQ(hooks_internal::num_hooks.load(), 0);
  tap.Reset();  // no-op, no crash
}

TEST(NativeModelTest, UnknownPathNamesNearest) {
  std::unique_ptr<Model> model = MakeNativeModel(test::SmallCnn().ptr());
  TapRecorder r;
  EXPECT_THAT(model->AddHook("layer1.0.conv3", r.Fn()),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("no module \"layer1.0.conv3\" in this native model; did you "
                                 "mean \"layer1.0.conv1\" or \"layer1.0.conv2\"?")));
}

TEST(NativeModelTest, DeducedForwardChecksArguments) {
  std::unique_ptr<Model> model = MakeNativeModel(test::SmallCnn().ptr());
  try {
    model->Forward({at::ones({1, 1, 28, 28}), at::ones({1})});
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what_without_backtrace(),
                HasSubstr("SmallCnn.forward takes 1 argument(s), got 2"));
  }
  try {
    model->Forward({at::ones({1, 1, 28, 28})}, {{"scale", 2.0}});
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what_without_backtrace(), HasSubstr("takes no keyword arguments"));
  }
}

TEST(NativeModelTest, ExplicitForwardFnReadsKwargs) {
  auto lin = std::make_shared<torch::nn::LinearImpl>(2, 1);
  std::unique_ptr<Model> model =
      MakeNativeModel(lin, [lin](std::vector<c10::IValue>& args, const Kwargs& kwargs) {
        double scale = kwargs.count("scale") ? kwargs.at("scale").toDouble() : 1.0;
        return c10::IValue(lin->forward(args[0].toTensor()) * scale);
      });
  const at::Tensor x = at::ones({1, 2});
  const at::Tensor once = model->Forward({x}).toTensor();
  EXPECT_THAT(model->Forward({x}, {{"scale", 3.0}}), IValueNear(once * 3, 1e-5));
}

TEST(NativeModelTest, StateMovesBetweenNativeAndTorchScriptTwins) {
  // Train-mode-free check that the twins agree on names and shapes: a state saved from the
  // native model loads strictly into a fresh native model and gives the same output.
  std::unique_ptr<Model> a = SmallCnnModel(test::ModelKind::kNative);
  const std::string path = test::TempPath("native_state.pt");
  ASSERT_THAT(a->SaveState(path), IsOk());
  std::unique_ptr<Model> b = MakeNativeModel(test::SmallCnn().ptr());
  ASSERT_THAT(b->LoadState(path), IsOk());
  b->SetTraining(false);
  const at::Tensor x = at::randn({3, 1, 28, 28});
  EXPECT_THAT(b->Forward({x}), IValueNear(a->Forward({x}), 1e-5));
}

TEST(NativeModelTest, IgnoreMismatchedSizesLoadsWhatFits) {
  // A [3 -> 4, 4 -> 2] MLP's state into a [3 -> 4, 4 -> 5] one: the first layer loads, the
  // second (shapes [2, 4] and [2] in the file) is left as it was; refused without the option.
  auto mlp = [](int64_t out) {
    auto seq = torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::Linear(4, out));
    return MakeNativeModel(seq.ptr(), [seq](std::vector<c10::IValue>& args, const Kwargs&) mutable {
      return c10::IValue(seq->forward(args[0].toTensor()));
    });
  };
  std::unique_ptr<Model> source = mlp(2), target = mlp(5);
  const std::string path = test::TempPath("mismatched.pt");
  ASSERT_THAT(source->SaveState(path), IsOk());
  const at::Tensor kept = target->NamedParameters()[2].second.clone();
  EXPECT_THAT(target->LoadState(path),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shape mismatch: 1.weight")));
  ASSERT_THAT(target->LoadState(path, {.strict = false, .ignore_mismatched_sizes = true}), IsOk());
  EXPECT_TRUE(at::equal(target->NamedParameters()[0].second, source->NamedParameters()[0].second));
  EXPECT_TRUE(at::equal(target->NamedParameters()[2].second, kept));
}

TEST(NativeModelTest, ToMovesDtype) {
  std::unique_ptr<Model> model = MakeNativeModel(test::SmallCnn().ptr());
  model->To(c10::Device(c10::kCPU), at::kDouble);
  for (const auto& [name, p] : model->NamedParameters()) {
    EXPECT_EQ(p.scalar_type(), at::kDouble) << name;
  }
  // Integer buffers keep their type.
  for (const auto& [name, b] : model->NamedBuffers()) {
    if (name.find("num_batches_tracked") != std::string::npos) {
      EXPECT_EQ(b.scalar_type(), at::kLong) << name;
    }
  }
}

}  // namespace
}  // namespace kd
