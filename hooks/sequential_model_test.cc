#include "hooks/sequential_model.h"

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hooks/forward_hook_manager.h"
#include "hooks/hook_point.h"
#include "hooks/native_model.h"
#include "testing/fixture_models.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace {

using ::kd::test::At;
using ::kd::test::FixtureInputs;
using ::kd::test::IValueNear;
using ::kd::test::LoadExpected;
using ::kd::test::ModelKind;
using ::kd::test::SmallCnnModel;
using ::testing::HasSubstr;

// The value of `value`; a failed test (gtest reports the exception) if it is an error.
template <typename T>
T Ok(absl::StatusOr<T> value) {
  if (!value.ok()) throw std::runtime_error(value.status().ToString());
  return *std::move(value);
}

// What Python's forward hooks recorded on small_cnn (make_fixtures.py): every call of `path`.
c10::IValue PythonCalls(const std::string& path, const std::string& io) {
  return At(At(At(LoadExpected("small_cnn"), "hooks"), path), io);
}

class SequentialModelTest : public ::testing::TestWithParam<ModelKind> {
 protected:
  std::unique_ptr<Model> source_ = SmallCnnModel(GetParam());
  std::vector<c10::IValue> inputs_ = FixtureInputs(LoadExpected("small_cnn"));
};

TEST_P(SequentialModelTest, ChainsTheModulesAsPythonComputesThem) {
  // small_cnn trimmed after layer2: Python's hook on "layer2.0" saw what it returns.
  std::unique_ptr<Model> trimmed =
      Ok(MakeSequentialModel(*source_, {"stem", "layer1", "down", "layer2"}));
  EXPECT_EQ(trimmed->kind(), "sequential");
  EXPECT_THAT(trimmed->Forward(inputs_),
              IValueNear(PythonCalls("layer2.0", "output").toTupleRef().elements()[0], 1e-5));
  // Layers of a Sequential on their own (Conv2d, BatchNorm2d, ReLU): the stem's output.
  std::unique_ptr<Model> stem = Ok(MakeSequentialModel(*source_, {"stem.0", "stem.1", "stem.2"}));
  EXPECT_THAT(stem->Forward(inputs_),
              IValueNear(PythonCalls("stem", "output").toTupleRef().elements()[0], 1e-5));
}

TEST_P(SequentialModelTest, SharesTheSourcesTensorsUnderTorchdistillsNames) {
  std::unique_ptr<Model> trimmed = Ok(MakeSequentialModel(*source_, {"stem.0", "layer2"}));
  std::map<std::string, at::Tensor> source_params, params;
  for (const auto& [name, t] : source_->NamedParameters()) source_params[name] = t;
  for (const auto& [name, t] : trimmed->NamedParameters()) params[name] = t;
  ASSERT_EQ(params.count("stem__attr__0.weight"), 1);
  EXPECT_TRUE(params["stem__attr__0.weight"].is_same(source_params["stem.0.weight"]));
  EXPECT_TRUE(params["layer2.0.conv1.weight"].is_same(source_params["layer2.0.conv1.weight"]));
  // stem.0: weight and bias; the block: two bias-free convs, two batch norms (weight, bias).
  EXPECT_EQ(params.size(), 2 + 6);
  EXPECT_TRUE(trimmed->CheckModulePath("stem__attr__0").ok());
  EXPECT_TRUE(trimmed->CheckModulePath("layer2.0.bn2").ok());
  // Training mode reaches every element and so the source's modules.
  trimmed->SetTraining(true);
  EXPECT_TRUE(trimmed->is_training());
  std::unique_ptr<Model> layer2 = Ok(source_->Submodel("layer2"));
  EXPECT_TRUE(layer2->is_training());
}

TEST_P(SequentialModelTest, HooksRecordWhatPythonsHooksRecord) {
  std::unique_ptr<Model> trimmed =
      Ok(MakeSequentialModel(*source_, {"stem", "layer1", "down", "layer2"}));
  ForwardHookManager manager;
  // Block's relu runs twice per call; "" is the whole chain.
  ASSERT_THAT(manager.AddHook(*trimmed, "layer1.0.relu", {.accumulates = true}), IsOk());
  ASSERT_THAT(manager.AddHook(*trimmed, "stem", {}), IsOk());
  ASSERT_THAT(manager.AddHook(*trimmed, "", {}), IsOk());
  const c10::IValue out = trimmed->Forward(inputs_);
  IoDict io = Ok(manager.PopIoDict());
  const c10::IValue relu = PythonCalls("layer1.0.relu", "output");
  ASSERT_EQ(relu.toTupleRef().elements().size(), 2);
  EXPECT_THAT(
      io.at("layer1.0.relu").at("output"),
      IValueNear(c10::IValue(c10::List<at::Tensor>({relu.toTupleRef().elements()[0].toTensor(),
                                                    relu.toTupleRef().elements()[1].toTensor()})),
                 1e-5));
  EXPECT_THAT(io.at("stem").at("output"),
              IValueNear(PythonCalls("stem", "output").toTupleRef().elements()[0], 1e-5));
  EXPECT_THAT(io.at("").at("output"), IValueNear(out, 0));
  EXPECT_THAT(io.at("").at("input"), IValueNear(inputs_[0], 0));
}

TEST_P(SequentialModelTest, RefusesPathsItCannotChain) {
  EXPECT_THAT(MakeSequentialModel(*source_, {}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(MakeSequentialModel(*source_, {""}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the whole model")));
  EXPECT_THAT(MakeSequentialModel(*source_, {"stem", "stem"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("listed twice")));
  EXPECT_THAT(
      MakeSequentialModel(*source_, {"layer1", "layer1.0"}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"layer1.0\" overlaps \"layer1\"")));
  EXPECT_THAT(MakeSequentialModel(*source_, {"stem", "layer3"}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("layer1")));
  std::unique_ptr<Model> trimmed = Ok(MakeSequentialModel(*source_, {"stem"}));
  EXPECT_THAT(trimmed->CheckModulePath("stem.3"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("stem.2")));
}

INSTANTIATE_TEST_SUITE_P(BothKinds, SequentialModelTest, test::kBothKinds, test::ModelKindName);

// A module type libkd cannot call on its own until its forward is registered.
struct DoubleImpl : torch::nn::Module {
  at::Tensor forward(at::Tensor x) { return x * 2; }
};
TORCH_MODULE(Double);

struct OuterImpl : torch::nn::Module {
  OuterImpl() : inner(register_module("inner", Double())) {}
  at::Tensor forward(at::Tensor x) { return Call(inner, x) + 1; }
  Double inner;
};
TORCH_MODULE(Outer);

TEST(NativeSubmodelTest, AnUnknownModuleTypeNamesTheRegistrationThatFixesIt) {
  std::unique_ptr<Model> model = MakeNativeModel(Outer().ptr());
  EXPECT_THAT(model->Submodel("inner"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("kd::RegisterNativeModuleForward<DoubleImpl>()")));
  RegisterNativeModuleForward<DoubleImpl>();
  std::unique_ptr<Model> inner = Ok(model->Submodel("inner"));
  EXPECT_THAT(inner->Forward({at::full({2}, 3.0)}), IValueNear(at::full({2}, 6.0), 0));
  std::unique_ptr<Model> whole = Ok(model->Submodel(""));
  EXPECT_THAT(whole->Forward({at::full({2}, 3.0)}), IValueNear(at::full({2}, 7.0), 0));
}

}  // namespace
}  // namespace kd
