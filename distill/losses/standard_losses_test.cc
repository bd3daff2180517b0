#include <map>
#include <string>

#include <ATen/ATen.h>

#include "distill/losses/loss.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace {

using ::kd::test::At;
using ::kd::test::IValueNear;
using ::kd::test::LoadExpected;
using ::testing::HasSubstr;

// Every case recorded from the peers' own classes (tests/testdata/make_loss_fixtures.py:
// torch.nn's losses, torchdistill's KDLoss): the value and the gradient of each input.
TEST(StandardLossesTest, ValuesAndGradientsEqualThePeers) {
  const c10::IValue cases = LoadExpected("losses");
  for (const c10::IValue& c : cases.toTupleRef().elements()) {
    const std::string key = At(c, "key").toStringRef();
    Kwargs kwargs;
    for (const auto& entry : At(c, "kwargs").toGenericDict()) {
      kwargs.emplace(entry.key().toStringRef(), entry.value());
    }
    SCOPED_TRACE(key);
    auto loss = MakeLoss(key, kwargs);
    ASSERT_THAT(loss, IsOk());
    std::map<std::string, at::Tensor> inputs;
    for (const auto& entry : At(c, "inputs").toGenericDict()) {
      at::Tensor t = entry.value().toTensor().clone();
      if (t.is_floating_point()) t.requires_grad_(true);
      inputs.emplace(entry.key().toStringRef(), t);
    }
    auto value = (*loss)->Forward(LossInputs(inputs));
    ASSERT_THAT(value, IsOk());
    EXPECT_THAT(c10::IValue(*value), IValueNear(At(c, "value"), 1e-6));
    value->sum().backward();
    for (const auto& entry : At(c, "grads").toGenericDict()) {
      const std::string& name = entry.key().toStringRef();
      EXPECT_THAT(c10::IValue(inputs.at(name).grad()), IValueNear(entry.value(), 1e-6)) << name;
    }
  }
}

TEST(StandardLossesTest, KdIsZeroForIdenticalLogitsAtAnyTemperature) {
  const at::Tensor logits = at::randn({3, 7});
  for (double t : {0.5, 1.0, 4.0, 20.0}) {
    auto loss = MakeLoss("KDLoss", {{"temperature", t}});
    ASSERT_THAT(loss, IsOk());
    auto value = (*loss)->Forward({{"student", logits}, {"teacher", logits}});
    ASSERT_THAT(value, IsOk());
    EXPECT_NEAR(value->item<double>(), 0.0, 1e-7) << t;
  }
}

TEST(StandardLossesTest, MistakesAreNamed) {
  auto kd = MakeLoss("KDLoss", {{"temperature", 4.0}});
  ASSERT_THAT(kd, IsOk());
  EXPECT_THAT((*kd)->Forward({{"student", at::randn({2, 3})}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("loss \"KDLoss\" needs the input \"teacher\"; given: student")));
  EXPECT_THAT((*kd)->Forward({{"student", at::randn({2, 3})}, {"teacher", at::randn({2, 4})}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("student has shape [2, 3] but teacher has [2, 4]")));
  // Elementwise losses take torch's names or a distillation config's.
  auto mse = MakeLoss("MSELoss", {});
  ASSERT_THAT(mse, IsOk());
  const at::Tensor a = at::ones({2, 2}), b = at::zeros({2, 2});
  EXPECT_THAT((*mse)->Forward({{"student", a}, {"teacher", b}}), IsOk());
  EXPECT_THAT((*mse)->Forward({{"input", a}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs the input \"target\"")));
  EXPECT_THAT(MakeLoss("KDLos", {}), StatusIs(absl::StatusCode::kNotFound,
                                              HasSubstr("did you mean \"KDLoss\"?")));
  EXPECT_THAT(MakeLoss("KDLoss", {{"temprature", 4.0}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("did you mean \"temperature\"?")));
}

}  // namespace
}  // namespace kd
