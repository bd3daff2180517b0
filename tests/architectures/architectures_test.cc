// Differential test on well-known architectures (make_architectures.py scripts them with
// random weights): every module path hooked at once equals what Python's hooks cloned at call
// time, and three truncated captures per model equal the uncut values.
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <ATen/core/grad_mode.h>

#include "base/torch_file.h"
#include "capture/module_capture_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hooks/forward_hook_manager.h"
#include "hooks/torchscript_model.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace {

using ::kd::test::At;
using ::kd::test::IValueNear;

constexpr double kAtol = 1e-4;

std::string DataPath(const std::string& file) {
  return std::string(std::getenv("TEST_SRCDIR")) + "/" + std::getenv("TEST_WORKSPACE") +
         "/tests/architectures/" + file;
}

// A module's recorded input: TorchScript passes keyword arguments positionally (defaults it
// filled in are left out), where Python's hook sees the positional ones only; compare those.
c10::IValue PositionalPrefix(const c10::IValue& recorded, const c10::IValue& python) {
  if (!recorded.isTuple()) return recorded;
  if (!python.isTuple()) return recorded.toTupleRef().elements()[0];  // one positional arg
  const auto& elements = recorded.toTupleRef().elements();
  const size_t n = python.toTupleRef().elements().size();
  if (elements.size() <= n) return recorded;
  return c10::ivalue::Tuple::create(std::vector<c10::IValue>(elements.begin(),
                                                             elements.begin() + n));
}

class ArchitecturesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ArchitecturesTest, EveryHookedValueEqualsPythonsCutAndUncut) {
  const std::string name = GetParam();
  auto model = LoadTorchScriptModel(DataPath(name + ".pt"));
  ASSERT_THAT(model, IsOk());
  auto expected = ReadTorchFile(DataPath(name + ".expected.pt"));
  ASSERT_THAT(expected, IsOk());
  (*model)->SetTraining(At(*expected, "training").toBool());  // as Python ran it
  const std::vector<c10::IValue> inputs = At(*expected, "inputs").toTupleRef().elements().vec();
  const c10::impl::GenericDict hooks = At(*expected, "hooks").toGenericDict();
  at::NoGradGuard no_grad;

  ForwardHookManager manager;
  std::vector<std::string> paths, called_once;
  for (const auto& entry : hooks) {
    const std::string& path = entry.key().toStringRef();
    paths.push_back(path);
    if (At(entry.value(), "output").toTupleRef().elements().size() == 1) {
      called_once.push_back(path);
    }
    ASSERT_THAT(manager.AddHook(**model, path, {.accumulates = true}), IsOk()) << path;
  }
  (*model)->Forward(inputs);
  auto io = manager.PopIoDict();
  ASSERT_THAT(io, IsOk());
  for (const auto& entry : hooks) {
    const std::string& path = entry.key().toStringRef();
    const auto& python_inputs = At(entry.value(), "input").toTupleRef().elements();
    auto outputs = GetIo(*io, path, kOutput);
    auto inputs_recorded = GetIo(*io, path, kInput);
    ASSERT_THAT(outputs, IsOk()) << path;
    ASSERT_THAT(inputs_recorded, IsOk()) << path;
    const auto& recorded_inputs = inputs_recorded->toListRef();
    EXPECT_THAT(*outputs, IValueNear(At(entry.value(), "output"), kAtol))
        << name << " " << path << " output";
    ASSERT_EQ(recorded_inputs.size(), python_inputs.size()) << path;
    for (size_t i = 0; i < python_inputs.size(); ++i) {
      EXPECT_THAT(PositionalPrefix(recorded_inputs[i], python_inputs[i]),
                  IValueNear(python_inputs[i], kAtol))
          << name << " " << path << " input of call " << i;
    }
  }

  // Three cuts: after modules a quarter, half and three quarters of the way through.
  ASSERT_FALSE(called_once.empty());
  std::set<std::string> cuts;
  for (size_t q = 1; q <= 3; ++q) cuts.insert(called_once[called_once.size() * q / 4]);
  for (const std::string& path : cuts) {
    ModuleCaptureEngine engine(**model, {path}, {.auto_truncate = true});
    ASSERT_THAT(engine.Register(), IsOk()) << path;
    auto out = engine.Forward(inputs);
    ASSERT_THAT(out, IsOk()) << path;
    EXPECT_TRUE(out->isNone()) << path;
    EXPECT_THAT(engine.GetCaptured(0)->output,
                IValueNear(At(hooks.at(path), "output").toTupleRef().elements()[0], kAtol))
        << name << " cut after " << path;
  }
}

INSTANTIATE_TEST_SUITE_P(All, ArchitecturesTest,
                         ::testing::Values("resnet18", "mobilenet_v3_small", "squeezenet1_1",
                                           "shufflenet_v2_x0_5", "densenet121",
                                           "efficientnet_b0", "transformer_encoder", "lstm"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kd
