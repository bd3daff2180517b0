// What a ForwardHookManager records when the rest of the forward writes a recorded value in
// place: the value as the module returned it (HookValues::kAsReturned, the default), on
// TorchScript models (copies where the graph writes) and native ones (write guards:
// hooks/internal/write_guard.h), or torchdistill's references.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <torch/nn/modules/linear.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hooks/forward_hook_manager.h"
#include "hooks/hook_point.h"
#include "hooks/internal/write_guard.h"
#include "hooks/native_model.h"
#include "hooks/torchscript_model.h"
#include "testing/fixture_models.h"
#include "testing/fixtures.h"
#include "testing/small_cnn.h"
#include "testing/status_matchers.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace {

using ::kd::test::At;
using ::kd::test::FixtureInputs;
using ::kd::test::IValueNear;
using ::kd::test::LoadExpected;
using ::kd::test::TensorEq;

// A BasicBlock (in-place ReLU module after bn1, `out += identity`, the ReLU again) after an
// in-place Hardswish: every value as the module returned it, equal to what Python's hooks
// cloned at call time; with references, torchdistill's aliases.
TEST(ForwardHookManagerValuesTest, ValuesAreWhatTheModuleReturnedDespiteLaterInPlaceWrites) {
  std::unique_ptr<Model> model = test::TorchScriptFixture("resnet_tiny");
  const c10::IValue expected = LoadExpected("resnet_tiny");
  ForwardHookManager manager, references;
  for (const auto& entry : At(expected, "hooks").toGenericDict()) {
    const std::string& path = entry.key().toStringRef();
    ASSERT_THAT(manager.AddHook(*model, path, {.accumulates = true}), IsOk());
    ASSERT_THAT(
        references.AddHookToModule(*model, path, "ref." + path,
                                   {.accumulates = true, .values = HookValues::kReferences}),
        IsOk());
  }
  model->Forward(FixtureInputs(expected));
  auto io = manager.PopIoDict();
  auto ref = references.PopIoDict();
  ASSERT_THAT(io, IsOk());
  ASSERT_THAT(ref, IsOk());
  for (const auto& entry : At(expected, "hooks").toGenericDict()) {
    const std::string& path = entry.key().toStringRef();
    SCOPED_TRACE(path);
    EXPECT_THAT(io->at(path).at(kInput), IValueNear(At(entry.value(), "input"), 1e-6));
    EXPECT_THAT(io->at(path).at(kOutput), IValueNear(At(entry.value(), "output"), 1e-6));
  }
  // bn1's output is what relu_ then overwrote; stem's output what Hardswish overwrote.
  for (const std::string path : {"block.bn1", "block.bn2", "stem"}) {
    EXPECT_THAT(ref->at("ref." + path).at(kOutput),
                ::testing::Not(IValueNear(io->at(path).at(kOutput), 1e-6)))
        << path;
  }
}

// The same on a native model: a later in-place op does not reach the recorded value.
struct ScaleThenReluImpl : torch::nn::Module {
  ScaleThenReluImpl() : lin(register_module("lin", torch::nn::Linear(3, 3))) {}
  at::Tensor forward(at::Tensor x) {
    at::Tensor y = Call(lin, x);
    y.relu_();
    y.mul_(2);
    return y;
  }
  torch::nn::Linear lin;
};
TORCH_MODULE(ScaleThenRelu);

TEST(ForwardHookManagerValuesTest, NativeValuesAreWhatTheModuleReturned) {
  ScaleThenRelu net;
  std::unique_ptr<Model> model = MakeNativeModel(net.ptr());
  ForwardHookManager manager, references;
  ASSERT_THAT(manager.AddHook(*model, "lin"), IsOk());
  ASSERT_THAT(references.AddHookToModule(*model, "lin", "lin", {.values = HookValues::kReferences}),
              IsOk());
  const at::Tensor x = at::randn({4, 3});
  const c10::IValue y = model->Forward({x});
  const at::Tensor lin_out = net->lin->forward(x);
  auto io = manager.PopIoDict();
  auto ref = references.PopIoDict();
  ASSERT_THAT(io, IsOk());
  ASSERT_THAT(ref, IsOk());
  EXPECT_THAT(io->at("lin").at(kOutput), IValueNear(lin_out, 1e-6));
  EXPECT_THAT(ref->at("lin").at(kOutput), IValueNear(y, 0));  // the alias, relu'd and doubled
  // The copy keeps the autograd graph: gradients reach the linear layer through it.
  io->at("lin").at(kOutput).toTensor().sum().backward();
  EXPECT_TRUE(net->lin->weight.grad().defined());
}

// Without autograd (eval under no_grad, or values that need no grad) the copies
// are made another way (hooks/hook_point.cc): a later in-place op still does
// not reach them.
TEST(ForwardHookManagerValuesTest, NativeValuesAreWhatTheModuleReturnedWithoutGrad) {
  ScaleThenRelu net;
  std::unique_ptr<Model> model = MakeNativeModel(net.ptr());
  ForwardHookManager manager;
  ASSERT_THAT(manager.AddHook(*model, "lin"), IsOk());
  const at::Tensor x = at::randn({4, 3});
  at::NoGradGuard no_grad;
  const at::Tensor lin_out = net->lin->forward(x);
  model->Forward({x});
  auto io = manager.PopIoDict();
  ASSERT_THAT(io, IsOk());
  EXPECT_THAT(io->at("lin").at(kOutput), IValueNear(lin_out, 1e-6));
  EXPECT_THAT(io->at("lin").at(kInput), IValueNear(x, 0));
  EXPECT_FALSE(io->at("lin").at(kOutput).toTensor().requires_grad());
}

// Two hooked modules in a row, a then b on a's output; then the forward writes a's output in
// place (`change`, relu_ by default) and returns b's. Both records of a's output (a's output,
// b's input) hold it as it was returned, through one shared copy.
struct WritesBetweenImpl : torch::nn::Module {
  WritesBetweenImpl()
      : a(register_module("a", torch::nn::Linear(3, 3))),
        b(register_module("b", torch::nn::Linear(3, 3))) {}
  at::Tensor forward(at::Tensor x) {
    at::Tensor h = Call(a, x);
    at::Tensor y = Call(b, h);
    change(h);
    return y;
  }
  torch::nn::Linear a, b;
  std::function<void(at::Tensor&)> change = [](at::Tensor& h) { h.relu_(); };
};
TORCH_MODULE(WritesBetween);

TEST(ForwardHookManagerValuesTest, NativeChainSharesOneCopyOfWhatPassesBetweenModules) {
  at::manual_seed(0);
  WritesBetween net;
  std::unique_ptr<Model> model = MakeNativeModel(net.ptr());
  ForwardHookManager manager;
  ASSERT_THAT(manager.AddHook(*model, "a"), IsOk());
  ASSERT_THAT(manager.AddHook(*model, "b"), IsOk());
  const at::Tensor x = at::randn({4, 3});
  for (bool grad : {true, false}) {
    SCOPED_TRACE(grad ? "with autograd" : "under no_grad");
    at::AutoGradMode mode(grad);
    model->Forward({x});
    const at::Tensor h = net->a->forward(x);
    ASSERT_TRUE((h < 0).any().item<bool>());  // the relu_ changes it
    auto io = manager.PopIoDict();
    ASSERT_THAT(io, IsOk());
    EXPECT_THAT(io->at("a").at(kOutput), IValueNear(h, 1e-6));
    EXPECT_THAT(io->at("b").at(kInput), IValueNear(h, 1e-6));
    EXPECT_TRUE(io->at("a").at(kOutput).toTensor().is_same(io->at("b").at(kInput).toTensor()));
    EXPECT_EQ(io->at("a").at(kOutput).toTensor().requires_grad(), grad);
  }
}

// A hook that writes its copy in place gets it for itself: the next module's hook receives the
// value as returned.
TEST(ForwardHookManagerValuesTest, ACopyWrittenByItsHookIsNotShared) {
  at::manual_seed(0);
  WritesBetween net;
  at::Tensor b_input;
  HookHandle zero_a =
      AddNativeHook(*net->a, [](const std::vector<c10::IValue>&, const c10::IValue& output) {
        output.toTensor().zero_();
      });
  HookHandle keep_b =
      AddNativeHook(*net->b, [&](const std::vector<c10::IValue>& args, const c10::IValue&) {
        b_input = args[0].toTensor();
      });
  const at::Tensor x = at::randn({4, 3});
  at::NoGradGuard no_grad;
  net->forward(x);
  EXPECT_THAT(b_input, IValueNear(net->a->forward(x), 1e-6));
}

// What nothing writes is the model's own tensor (no copy); what the forward writes, or
// reshapes, or replaces, comes back as it was returned, on a model's hooks and on a raw
// module's alike.
TEST(ForwardHookManagerValuesTest, NativeValuesNothingWritesAreTheModelsOwn) {
  at::manual_seed(0);
  at::NoGradGuard no_grad;  // set_ wants it; with autograd: the next test
  const at::Tensor x = at::randn({4, 3});
  for (const auto& change : std::vector<std::function<void(at::Tensor&)>>{
           [](at::Tensor& h) { h.relu_(); },
           [](at::Tensor& h) { h.t_(); },
           [](at::Tensor& h) { h.narrow(0, 1, 2).fill_(9); },
           [](at::Tensor& h) { h.set_(at::zeros({2})); },
       }) {
    WritesBetween net;
    net->change = change;
    std::unique_ptr<Model> model = MakeNativeModel(net.ptr());
    ForwardHookManager manager;
    ASSERT_THAT(manager.AddHook(*model, "a"), IsOk());
    ASSERT_THAT(manager.AddHookToModule(*net->b, "raw.b"), IsOk());
    const at::Tensor h = net->a->forward(x).detach();
    const at::Tensor y = model->Forward({x}).toTensor();
    auto io = manager.PopIoDict();
    ASSERT_THAT(io, IsOk());
    EXPECT_THAT(io->at("a").at(kOutput), IValueNear(h, 1e-6));
    EXPECT_THAT(io->at("raw.b").at(kInput), IValueNear(h, 1e-6));
    EXPECT_TRUE(io->at("raw.b").at(kOutput).toTensor().is_same(y));
    EXPECT_TRUE(io->at("a").at(kInput).toTensor().is_same(x));
  }
}

// Gradients through a value the forward wrote later reach the parameters along the history it
// had when returned: d sum(x W^T + b) / dW = the column sums of x, for every row of W.
TEST(ForwardHookManagerValuesTest, GradientsThroughAWrittenValueFollowItsRecordedHistory) {
  at::manual_seed(0);
  WritesBetween net;
  net->change = [](at::Tensor& h) { h.mul_(100); };
  std::unique_ptr<Model> model = MakeNativeModel(net.ptr());
  ForwardHookManager manager;
  ASSERT_THAT(manager.AddHook(*model, "a", {.requires_input = false}), IsOk());
  ASSERT_THAT(manager.AddHook(*model, "b", {.requires_input = false}), IsOk());
  const at::Tensor x = at::randn({4, 3});
  const at::Tensor y = model->Forward({x}).toTensor();
  auto io = manager.PopIoDict();
  ASSERT_THAT(io, IsOk());
  EXPECT_TRUE(io->at("b").at(kOutput).toTensor().is_same(y));
  io->at("a").at(kOutput).toTensor().sum().backward();
  EXPECT_THAT(net->a->weight.grad(), IValueNear(x.sum(0).expand({3, 3}), 1e-6));
  EXPECT_THAT(net->a->bias.grad(), TensorEq(at::full({3}, 4.0)));
  EXPECT_FALSE(net->b->weight.grad().defined());
}

// Accumulated across forwards, under no_grad and under inference mode: every call as returned.
TEST(ForwardHookManagerValuesTest, AccumulatedNativeValuesAreEachAsReturned) {
  at::manual_seed(0);
  WritesBetween net;
  std::unique_ptr<Model> model = MakeNativeModel(net.ptr());
  ForwardHookManager manager;
  ASSERT_THAT(manager.AddHook(*model, "a", {.accumulates = true, .stacks_accumulated = true}),
              IsOk());
  const at::Tensor x1 = at::randn({4, 3}), x2 = at::randn({4, 3});
  const at::Tensor expected = at::stack({net->a->forward(x1), net->a->forward(x2)}).detach();
  for (bool inference : {false, true}) {
    SCOPED_TRACE(inference ? "inference mode" : "no_grad");
    at::NoGradGuard no_grad;
    std::optional<c10::InferenceMode> mode;
    if (inference) mode.emplace();
    model->Forward({x1});
    model->Forward({x2});
    auto io = manager.PopIoDict();
    ASSERT_THAT(io, IsOk());
    EXPECT_THAT(io->at("a").at(kOutput), IValueNear(expected, 1e-6));
    EXPECT_THAT(io->at("a").at(kInput), IValueNear(at::stack({x1, x2}), 0));
  }
}

// A module called twice in a forward, each output written in place after its call: the last
// call's value as returned wins, pop after pop, also after a forward cleared without a pop
// (guards are reused from one forward to the next, and a replaced call's guard released).
struct CalledTwiceImpl : torch::nn::Module {
  CalledTwiceImpl() : a(register_module("a", torch::nn::Linear(3, 3))) {}
  at::Tensor forward(at::Tensor x) {
    at::Tensor first = Call(a, x);
    first.mul_(-1);
    at::Tensor second = Call(a, x + 1);
    second.relu_();
    return first + second;
  }
  torch::nn::Linear a;
};
TORCH_MODULE(CalledTwice);

TEST(ForwardHookManagerValuesTest, TheLastOfTwoCallsIsAsReturnedPopAfterPop) {
  at::manual_seed(0);
  CalledTwice net;
  std::unique_ptr<Model> model = MakeNativeModel(net.ptr());
  ForwardHookManager manager;
  ASSERT_THAT(manager.AddHook(*model, "a"), IsOk());
  for (bool grad : {false, true}) {
    SCOPED_TRACE(grad ? "with autograd" : "no_grad");
    std::optional<at::NoGradGuard> no_grad;
    if (!grad) no_grad.emplace();
    for (int step = 0; step < 4; ++step) {
      const at::Tensor x = at::randn({2, 3});
      model->Forward({x});
      if (step == 1) {
        manager.ClearIoDict();
        continue;
      }
      auto io = manager.PopIoDict();
      ASSERT_THAT(io, IsOk());
      EXPECT_THAT(io->at("a").at(kOutput), IValueNear(net->a->forward(x + 1).detach(), 1e-6));
      EXPECT_THAT(io->at("a").at(kInput), IValueNear(x + 1, 0));
    }
  }
}

// A forward that writes nothing in place copies nothing: no kernel of the small CNN's
// (oneDNN convolutions, batch norm, pooling, linear; forward and backward) asks a recorded
// storage for a writable pointer, so the guards cost no memory.
TEST(ForwardHookManagerValuesTest, NativeForwardWithoutInPlaceWritesCopiesNothing) {
  test::SmallCnn net;
  std::unique_ptr<Model> model = MakeNativeModel(net.ptr());
  ForwardHookManager manager;
  for (const ModuleInfo& module : model->NamedModules()) {
    ASSERT_THAT(manager.AddHook(*model, module.path, {.accumulates = true}), IsOk());
  }
  at::manual_seed(0);
  const at::Tensor x = at::randn({2, 1, 28, 28});
  const int64_t copies = hooks_internal::WriteGuards::CopiesMade();
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "eval under no_grad");
    model->SetTraining(training);
    at::AutoGradMode grad(training);
    const at::Tensor y = model->Forward({x}).toTensor();
    if (training) y.sum().backward();
    auto io = manager.PopIoDict();
    ASSERT_THAT(io, IsOk());
    EXPECT_THAT(io->at("fc").at(kOutput).toListRef()[0], IValueNear(y, 0));
    EXPECT_EQ(hooks_internal::WriteGuards::CopiesMade(), copies);
  }
}

}  // namespace
}  // namespace kd
