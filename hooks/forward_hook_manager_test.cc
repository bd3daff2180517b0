// torchdistill's ForwardHookManager tests, on a TorchScript model and its native twin, plus
// the values Python forward hooks recorded on the same fixtures.
#include "hooks/forward_hook_manager.h"

#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hooks/hook_point.h"
#include "hooks/native_model.h"
#include "hooks/torchscript_model.h"
#include "testing/fixture_models.h"
#include "testing/fixtures.h"
#include "testing/small_cnn.h"
#include "testing/status_matchers.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace {

using ::kd::test::IValueNear;

using ::kd::test::AllClose;
using ::kd::test::At;
using ::kd::test::FixtureInputs;
using ::kd::test::FixturePath;
using ::kd::test::LoadExpected;
using ::kd::test::SmallCnnModel;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

at::Tensor Input(int64_t batch = 2) {
  at::manual_seed(0);
  return at::randn({batch, 1, 28, 28});
}

class ForwardHookManagerTest : public ::testing::TestWithParam<test::ModelKind> {};

TEST_P(ForwardHookManagerTest, PopIoDictOutputEqualsModelOutput) {
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  ForwardHookManager manager(c10::kCPU);
  ASSERT_THAT(manager.AddHook(*model, "fc"), IsOk());
  ASSERT_THAT(manager.AddHook(*model, ""), IsOk());
  const at::Tensor x = Input();
  const at::Tensor y = model->Forward({x}).toTensor();
  auto io = manager.PopIoDict();
  ASSERT_THAT(io, IsOk());
  EXPECT_THAT((*io)["fc"]["output"], IValueNear(y, 0));
  EXPECT_THAT((*io)[""]["output"], IValueNear(y, 0));
  EXPECT_THAT((*io)[""]["input"], IValueNear(x, 0));
  // fc's input is the flattened pooled feature map: (2, 16).
  EXPECT_EQ((*io)["fc"]["input"].toTensor().sizes(), (std::vector<int64_t>{2, 16}));
}

TEST_P(ForwardHookManagerTest, DictIsEmptyAfterPop) {
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  ForwardHookManager manager;
  ASSERT_THAT(manager.AddHook(*model, "layer2"), IsOk());
  model->Forward({Input()});
  ASSERT_THAT(manager.PopIoDict(), IsOk());
  auto second = manager.PopIoDict();
  ASSERT_THAT(second, IsOk());
  EXPECT_THAT((*second)["layer2"], IsEmpty());
  EXPECT_THAT(GetIo(*second, "layer2", "output"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("no \"output\" recorded for module \"layer2\" (recorded: "
                                 "nothing; did a forward run since the last pop?)")));
}

TEST_P(ForwardHookManagerTest, LastCallWinsWithoutAccumulates) {
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  ForwardHookManager manager;
  ASSERT_THAT(manager.AddHook(*model, "fc"), IsOk());
  ASSERT_THAT(manager.AddHook(*model, "layer1.0.relu"), IsOk());
  model->Forward({Input(1)});
  const at::Tensor x2 = Input(3);
  const at::Tensor y2 = model->Forward({x2}).toTensor();
  auto io = manager.PopIoDict();
  ASSERT_THAT(io, IsOk());
  EXPECT_THAT((*io)["fc"]["output"], IValueNear(y2, 0));
  // relu runs twice per forward; its second call is relu(bn2(conv2(.)) + x): non-negative,
  // and its input is not (the residual sum).
  const at::Tensor relu_in = (*io)["layer1.0.relu"]["input"].toTensor();
  const at::Tensor relu_out = (*io)["layer1.0.relu"]["output"].toTensor();
  EXPECT_THAT(relu_out, IValueNear(at::relu(relu_in), 0));
  EXPECT_EQ(relu_out.size(0), 3);
}

TEST_P(ForwardHookManagerTest, AccumulatesInCallOrderAcrossForwards) {
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  ForwardHookManager manager;
  ASSERT_THAT(manager.AddHook(*model, "fc", {.accumulates = true}), IsOk());
  const at::Tensor y1 = model->Forward({Input(1)}).toTensor();
  const at::Tensor y2 = model->Forward({Input(3)}).toTensor();
  auto io = manager.PopIoDict();
  ASSERT_THAT(io, IsOk());
  const c10::IValue outputs = (*io)["fc"]["output"];
  ASSERT_TRUE(outputs.isList());
  ASSERT_EQ(outputs.toListRef().size(), 2u);
  EXPECT_THAT(outputs.toListRef()[0], IValueNear(y1, 0));
  EXPECT_THAT(outputs.toListRef()[1], IValueNear(y2, 0));
}

// Hooks every path Python's hooks recorded (make_fixtures.py) with accumulates, runs one
// forward on the fixture's inputs and compares every call's values with Python's (`io_types`:
// "input", "output" or both).
void ExpectPythonHookValues(Model& model, const c10::IValue& expected,
                            const std::vector<std::string>& io_types, double atol) {
  ForwardHookManager manager;
  for (const auto& entry : At(expected, "hooks").toGenericDict()) {
    ASSERT_THAT(manager.AddHook(model, entry.key().toStringRef(), {.accumulates = true}), IsOk());
  }
  model.Forward(FixtureInputs(expected));
  auto io = manager.PopIoDict();
  ASSERT_THAT(io, IsOk());
  for (const auto& entry : At(expected, "hooks").toGenericDict()) {
    const std::string& path = entry.key().toStringRef();
    for (const std::string& io_type : io_types) {
      SCOPED_TRACE(path + " " + io_type);
      EXPECT_THAT(io->at(path).at(io_type), IValueNear(At(entry.value(), io_type), atol));
    }
  }
}

TEST_P(ForwardHookManagerTest, AccumulatedValuesEqualPythonHooks) {
  // Python recorded every call of each hooked module; with accumulates, one forward gives the
  // same list in the same order.
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  ExpectPythonHookValues(*model, LoadExpected("small_cnn"), {kInput, kOutput}, 1e-5);
}

// Overloaded forwards (forward__0, forward__1): a DenseNet-like layer called with a list, then
// with a tensor, and a scripted LSTM; hooks fire on every call, as Python's do.
TEST(ForwardHookManagerValuesTest, OverloadedForwardsAreHooked) {
  std::unique_ptr<Model> model = test::TorchScriptFixture("overloads");
  const c10::IValue expected = LoadExpected("overloads");
  ExpectPythonHookValues(*model, expected, {kOutput}, 1e-6);
  ForwardHookManager manager;
  ASSERT_THAT(manager.AddHook(*model, "layer", {.accumulates = true}), IsOk());
  model->Forward(FixtureInputs(expected));
  auto io = manager.PopIoDict();
  ASSERT_THAT(io, IsOk());
  EXPECT_EQ(io->at("layer").at(kOutput).toListRef().size(), 2u);
  // The list argument of the first call, as Python's hook saw it.
  EXPECT_THAT(
      io->at("layer").at(kInput).toListRef()[0],
      IValueNear(At(At(At(expected, "hooks"), "layer"), "input").toTupleRef().elements()[0], 1e-6));
}

TEST_P(ForwardHookManagerTest, StacksAccumulatedIntoNByOutputShape) {
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  ForwardHookManager manager;
  ASSERT_THAT(
      manager.AddHook(*model, "layer1.1.relu", {.accumulates = true, .stacks_accumulated = true}),
      IsOk());
  model->Forward({Input(2)});
  model->Forward({Input(2)});
  auto io = manager.PopIoDict();
  ASSERT_THAT(io, IsOk());
  // Two forwards x two relu calls, each (2, 8, 28, 28).
  EXPECT_EQ((*io)["layer1.1.relu"]["output"].toTensor().sizes(),
            (std::vector<int64_t>{4, 2, 8, 28, 28}));
}

TEST_P(ForwardHookManagerTest, StackingWithoutAccumulatingIsInvalid) {
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  ForwardHookManager manager;
  EXPECT_THAT(manager.AddHook(*model, "fc", {.stacks_accumulated = true}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("hook on \"fc\": stacks_accumulated requires accumulates")));
  EXPECT_THAT(manager.AddHook(*model, "fc", {.requires_input = false, .requires_output = false}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("would record nothing")));
  EXPECT_THAT(manager.HookedKeys(), IsEmpty());
}

TEST_P(ForwardHookManagerTest, StackingUnequalShapesNamesPathAndShapes) {
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  ForwardHookManager manager;
  ASSERT_THAT(manager.AddHook(*model, "fc", {.accumulates = true, .stacks_accumulated = true}),
              IsOk());
  model->Forward({Input(1)});
  model->Forward({Input(3)});
  EXPECT_THAT(manager.PopIoDict(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cannot stack the accumulated input of \"fc\": shapes differ "
                                 "([1, 16], [3, 16])")));
}

TEST_P(ForwardHookManagerTest, ClearEmptiesEverything) {
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  ForwardHookManager manager;
  ASSERT_THAT(manager.AddHook(*model, "fc"), IsOk());
  ASSERT_THAT(manager.AddHook(*model, "stem.0"), IsOk());
  model->Forward({Input()});
  manager.Clear();
  EXPECT_THAT(manager.HookedKeys(), IsEmpty());
  model->Forward({Input()});
  auto io = manager.PopIoDict();
  ASSERT_THAT(io, IsOk());
  EXPECT_THAT(*io, IsEmpty());
}

TEST_P(ForwardHookManagerTest, ClearIoDictKeepsHooks) {
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  ForwardHookManager manager;
  ASSERT_THAT(manager.AddHook(*model, "fc", {.requires_input = false}), IsOk());
  model->Forward({Input()});
  manager.ClearIoDict();
  EXPECT_THAT(manager.HookedKeys(), ElementsAre("fc"));
  const at::Tensor y = model->Forward({Input(1)}).toTensor();
  auto io = manager.PopIoDict();
  ASSERT_THAT(io, IsOk());
  EXPECT_THAT((*io)["fc"]["output"], IValueNear(y, 0));
  EXPECT_EQ((*io)["fc"].count("input"), 0u);  // requires_input = false
}

TEST_P(ForwardHookManagerTest, ScopedHookRemovesItself) {
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  ForwardHookManager manager;
  {
    auto handle = manager.AddScopedHook(*model, "down");
    ASSERT_THAT(handle, IsOk());
    EXPECT_THAT(manager.HookedKeys(), ElementsAre("down"));
  }
  EXPECT_THAT(manager.HookedKeys(), IsEmpty());
  model->Forward({Input()});
  auto io = manager.PopIoDict();
  ASSERT_THAT(io, IsOk());
  EXPECT_THAT(*io, IsEmpty());
}

TEST_P(ForwardHookManagerTest, ScopedHandleMayOutliveManager) {
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  HookHandle handle;
  {
    ForwardHookManager manager;
    auto added = manager.AddScopedHook(*model, "fc");
    ASSERT_THAT(added, IsOk());
    handle = *std::move(added);
  }                // the manager removes its hooks
  handle.Reset();  // nothing left to do, no crash
  model->Forward({Input()});
}

TEST_P(ForwardHookManagerTest, SamePathTwiceNeedsAnotherKey) {
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  ForwardHookManager manager;
  ASSERT_THAT(manager.AddHook(*model, "fc"), IsOk());
  EXPECT_THAT(manager.AddHook(*model, "fc"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hooked already")));
  ASSERT_THAT(manager.AddHookToModule(*model, "fc", "student.fc", {.accumulates = true}), IsOk());
  const at::Tensor y = model->Forward({Input()}).toTensor();
  auto io = manager.PopIoDict();
  ASSERT_THAT(io, IsOk());
  EXPECT_THAT((*io)["fc"]["output"], IValueNear(y, 0));
  EXPECT_THAT((*io)["student.fc"]["output"], IValueNear(c10::ivalue::Tuple::create({y}), 0));
}

TEST_P(ForwardHookManagerTest, UnknownPathNamesNearest) {
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  ForwardHookManager manager;
  EXPECT_THAT(manager.AddHook(*model, "layer3"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("no module \"layer3\" in this " + model->kind() +
                                 " model; did you mean \"layer1\" or \"layer2\"?")));
}

TEST_P(ForwardHookManagerTest, TargetDeviceAndPopFromDevice) {
  std::unique_ptr<Model> model = SmallCnnModel(GetParam());
  ForwardHookManager manager(c10::kCPU);
  ASSERT_THAT(manager.AddHook(*model, "fc"), IsOk());
  model->Forward({Input()});
  // A change of device type drops what was recorded (torchdistill).
  manager.ChangeTargetDevice(c10::Device(c10::kMeta));
  EXPECT_EQ(manager.target_device(), c10::Device(c10::kMeta));
  auto dropped = manager.PopIoDict();
  ASSERT_THAT(dropped, IsOk());
  EXPECT_THAT((*dropped)["fc"], IsEmpty());
  // Popping gathers on the target device.
  model->Forward({Input()});
  auto io = manager.PopIoDict();
  ASSERT_THAT(io, IsOk());
  EXPECT_TRUE((*io)["fc"]["output"].toTensor().is_meta());
  EXPECT_EQ((*io)["fc"]["output"].toTensor().sizes(), (std::vector<int64_t>{2, 10}));
  // Popping from a device returns that device's values as they are.
  const at::Tensor y = model->Forward({Input()}).toTensor();
  auto from_meta = manager.PopIoDictFromDevice(c10::Device(c10::kMeta));
  ASSERT_THAT(from_meta, IsOk());
  EXPECT_THAT((*from_meta)["fc"], IsEmpty());
  auto from_cpu = manager.PopIoDictFromDevice(c10::Device(c10::kCPU));
  ASSERT_THAT(from_cpu, IsOk());
  EXPECT_THAT((*from_cpu)["fc"]["output"], IValueNear(y, 0));
}

INSTANTIATE_TEST_SUITE_P(BothKinds, ForwardHookManagerTest, test::kBothKinds, test::ModelKindName);

TEST(ForwardHookManagerNativeTest, HookOnRawModuleAndBypassedHookPoint) {
  test::DirectCallNet net;
  std::unique_ptr<Model> model = MakeNativeModel(net.ptr());
  ForwardHookManager manager;
  // A module reached directly, keyed by a path of the caller's choice.
  ASSERT_THAT(manager.AddHookToModule(*net->act, "head.act"), IsOk());
  const at::Tensor y = model->Forward({at::ones({2, 4})}).toTensor();
  auto io = manager.PopIoDict();
  ASSERT_THAT(io, IsOk());
  EXPECT_THAT((*io)["head.act"]["output"], IValueNear(y, 0));

  // lin is called as lin->forward(x): its hook can never fire, and popping says why.
  ASSERT_THAT(manager.AddHookToModule(*net->lin, "head.lin"), IsOk());
  model->Forward({at::ones({2, 4})});
  EXPECT_THAT(manager.PopIoDict(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("\"head.lin\" (Linear) never ran through a hook point"),
                             HasSubstr("kd::Call(child, ...)"))));
  manager.Clear();
  ASSERT_THAT(manager.AddHook(*model, "lin"), IsOk());
  model->Forward({at::ones({2, 4})});
  EXPECT_THAT(manager.PopIoDict(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("\"lin\" (Linear) never ran through a hook point")));
}

// Calls its Flatten on the input and on a copy of it on the meta device: one module on two
// devices in one forward, as replicas are.
struct TwoDevicesImpl : torch::nn::Module {
  enum Order { kMetaFirst, kCpuFirstThenWrite, kCpuOnly };
  TwoDevicesImpl() : act(register_module("act", torch::nn::Flatten())) {}
  at::Tensor forward(const at::Tensor& x) {
    if (order == kMetaFirst) Call(act, x.to(c10::kMeta));
    at::Tensor y = Call(act, x);
    if (order == kCpuFirstThenWrite) {
      Call(act, x.to(c10::kMeta));
      y.mul_(2);  // y (a view of x) written after its call, and so x
    }
    return y;
  }
  torch::nn::Flatten act;
  Order order = kMetaFirst;
};
TORCH_MODULE(TwoDevices);

class TwoDevicesTest : public ::testing::TestWithParam<HookValues> {};

TEST_P(TwoDevicesTest, CallsOnTwoDevicesAreKeptPerDevice) {
  TwoDevices net;
  std::unique_ptr<Model> model = MakeNativeModel(net.ptr());
  ForwardHookManager manager;
  const bool as_returned = GetParam() == HookValues::kAsReturned;
  ASSERT_THAT(manager.AddHook(*model, "act", {.values = GetParam()}), IsOk());
  for (auto order : {TwoDevicesImpl::kMetaFirst, TwoDevicesImpl::kCpuFirstThenWrite,
                     TwoDevicesImpl::kMetaFirst}) {
    net->order = order;
    const at::Tensor x = at::randn({3, 2, 2});
    const at::Tensor x_before = x.clone();
    const at::Tensor y = model->Forward({x}).toTensor();
    ASSERT_EQ(y.sizes(), (std::vector<int64_t>{3, 4}));
    // The CPU call's values are the CPU's (as returned: as they were before the write), the
    // meta call's the meta's, whichever came first.
    auto from_cpu = manager.PopIoDictFromDevice(c10::kCPU);
    ASSERT_THAT(from_cpu, IsOk());
    const bool written = order == TwoDevicesImpl::kCpuFirstThenWrite && as_returned;
    EXPECT_THAT((*from_cpu)["act"]["input"], IValueNear(written ? x_before : x, 0));
    EXPECT_THAT((*from_cpu)["act"]["output"], IValueNear(written ? x_before.flatten(1) : y, 0));
    auto from_meta = manager.PopIoDictFromDevice(c10::kMeta);
    ASSERT_THAT(from_meta, IsOk());
    ASSERT_TRUE((*from_meta)["act"]["output"].isTensor());
    EXPECT_TRUE((*from_meta)["act"]["output"].toTensor().is_meta());
    EXPECT_EQ((*from_meta)["act"]["input"].toTensor().sizes(), x.sizes());
    EXPECT_EQ((*from_meta)["act"]["output"].toTensor().sizes(), y.sizes());
  }
  // One device again: the last call's values, nothing left from the two-device forwards.
  net->order = TwoDevicesImpl::kCpuOnly;
  const at::Tensor x = at::randn({2, 4, 1});
  const at::Tensor y = model->Forward({x}).toTensor();
  auto io = manager.PopIoDict();
  ASSERT_THAT(io, IsOk());
  EXPECT_THAT((*io)["act"]["input"], IValueNear(x, 0));
  EXPECT_THAT((*io)["act"]["output"], IValueNear(y, 0));
  auto empty = manager.PopIoDict();
  ASSERT_THAT(empty, IsOk());
  EXPECT_THAT((*empty)["act"], IsEmpty());
}

// Both keep the last call apart until a second device's call spills it; as returned with its
// write guard.
INSTANTIATE_TEST_SUITE_P(BothValues, TwoDevicesTest,
                         ::testing::Values(HookValues::kReferences, HookValues::kAsReturned));

TEST(ForwardHookManagerTorchScriptTest, TupleOutputsAndMultiArgumentInputs) {
  auto model = LoadTorchScriptModel(FixturePath("tricky.pt"));
  ASSERT_THAT(model, IsOk());
  const c10::IValue expected = LoadExpected("tricky");
  ForwardHookManager manager;
  ASSERT_THAT(manager.AddHook(**model, "mix"), IsOk());
  ASSERT_THAT(manager.AddHook(**model, "act", {.accumulates = true}), IsOk());
  (*model)->Forward(FixtureInputs(expected));
  auto io = manager.PopIoDict();
  ASSERT_THAT(io, IsOk());
  const c10::IValue mix = At(At(expected, "hooks"), "mix");
  // Two positional arguments: a tuple; a tuple output stays a tuple.
  EXPECT_TRUE((*io)["mix"]["input"].isTuple());
  EXPECT_THAT((*io)["mix"]["input"], IValueNear(At(mix, "input").toTupleRef().elements()[0], 1e-5));
  EXPECT_THAT((*io)["mix"]["output"],
              IValueNear(At(mix, "output").toTupleRef().elements()[0], 1e-5));
  EXPECT_THAT((*io)["act"]["output"],
              IValueNear(At(At(At(expected, "hooks"), "act"), "output"), 1e-5));
}

// One manager hooks a TorchScript teacher and a native student; evaluating the teacher alone
// pops without complaint about the student, which did not run. Once the student runs, a
// bypassed hook point is reported.
TEST(ForwardHookManagerNativeTest, TeacherAloneDoesNotBlameTheStudent) {
  std::unique_ptr<Model> teacher = test::TorchScriptFixture("small_cnn");
  test::DirectCallNet net;
  std::unique_ptr<Model> student = MakeNativeModel(net.ptr());
  ForwardHookManager manager;
  ASSERT_THAT(manager.AddHook(*teacher, "fc"), IsOk());
  ASSERT_THAT(manager.AddHook(*student, "lin"),
              IsOk());  // bypassed: lin->forward(x)
  for (int i = 0; i < 2; ++i) {
    teacher->Forward({at::zeros({1, 1, 28, 28})});
    absl::StatusOr<IoDict> io = manager.PopIoDict();
    ASSERT_THAT(io, IsOk());
    EXPECT_EQ(io->at("fc").count("output"), 1u);
    // As in torchdistill, a hooked key is in the dict from registration on: empty here.
    EXPECT_TRUE(io->at("lin").empty());
  }
  student->Forward({at::ones({2, 4})});
  EXPECT_THAT(manager.PopIoDict(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("\"lin\" (Linear) never ran through a hook point")));
}

}  // namespace
}  // namespace kd
