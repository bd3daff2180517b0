#include "testing/tensor_matchers.h"

#include <ATen/ATen.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kd {
namespace test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

template <typename M, typename T>
std::string Explain(const M& matcher, const T& value) {
  ::testing::StringMatchResultListener listener;
  ::testing::ExplainMatchResult(matcher, value, &listener);
  return listener.str();
}

TEST(TensorMatchersTest, IValueNearComparesStructurallyWithinTolerance) {
  const c10::IValue a = c10::ivalue::Tuple::create({at::ones({2}), at::zeros({1})});
  EXPECT_THAT(a, IValueNear(a, 0));
  const c10::IValue b = c10::ivalue::Tuple::create({at::ones({2}), at::full({1}, 0.5)});
  EXPECT_THAT(b, Not(IValueNear(a, 0.1)));
  EXPECT_THAT(b, IValueNear(a, 0.5));
  EXPECT_EQ(Explain(IValueNear(a, 0.1), b), "at element 1: max abs difference 0.5 > 0.1");
  EXPECT_THAT(Explain(IValueNear(c10::IValue(at::ones({2})), 0), c10::IValue(at::ones({3}))),
              HasSubstr("shape [3] != expected [2]"));
  EXPECT_THAT(c10::IValue(3), Not(IValueNear(c10::IValue(4), 0)));
}

TEST(TensorMatchersTest, TensorEqWantsShapeDtypeAndEveryValue) {
  const at::Tensor t = at::tensor({1.0, NAN}).to(at::kFloat);
  EXPECT_THAT(t, TensorEq(t.clone()));  // NaN equals NaN
  EXPECT_THAT(t.to(at::kDouble), Not(TensorEq(t)));
  EXPECT_THAT(Explain(TensorEq(t), t.to(at::kDouble)), HasSubstr("dtype Double != expected Float"));
  EXPECT_THAT(at::tensor({1.0, 2.0}), Not(TensorEq(t)));
}

}  // namespace
}  // namespace test
}  // namespace kd
