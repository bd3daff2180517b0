// gMock matchers for tensors and IValues.
//
//   EXPECT_THAT(io.at("fc").at("output"), kd::test::IValueNear(expected, 1e-5));
//   EXPECT_THAT(recorded, kd::test::IValueNear(python_value, 0));   // exact values
//   EXPECT_THAT(tensor, kd::test::TensorEq(other));                 // shape, dtype, bits
//
// IValueNear compares structurally: tensors (same shape, values within `atol`, rtol 0, after
// converting to the expected dtype), tuples and lists element-wise (a tuple matches a list of
// the same values), anything else with ==. A mismatch explains the first difference and where
// it is ("at element 1: max abs difference 0.5 > 1e-05").
#ifndef LIBKD_TESTING_TENSOR_MATCHERS_H_
#define LIBKD_TESTING_TENSOR_MATCHERS_H_

#include <ostream>
#include <sstream>
#include <string>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include "gmock/gmock.h"

namespace kd {
namespace test {

// Whether `actual` is within `atol` of `expected` as IValueNear says; writes the first
// difference to `why` when not.
bool IValuesClose(const c10::IValue& actual, const c10::IValue& expected, double atol,
                  std::ostream* why);

// Whether two tensors have equal shapes, dtypes and values (NaN equals NaN); writes the first
// difference to `why` when not.
bool TensorsEqual(const at::Tensor& actual, const at::Tensor& expected, std::ostream* why);

// Expects `actual` (defined) to have `expected`'s shape and to differ from it by at most `rel`
// times expected's scale, its largest magnitude (at least 1e-3): float32 sums taken in another
// order differ in their last bits relative to the values summed, not to each element. `what`
// names the tensor in the failure.
void ExpectNearScale(const at::Tensor& actual, const at::Tensor& expected, const std::string& what,
                     double rel = 1e-5);

MATCHER_P2(IValueNear, expected, atol,
           "is an IValue within " + ::testing::PrintToString(atol) + " of the expected one") {
  std::ostringstream why;
  const bool close = IValuesClose(arg, expected, atol, &why);
  *result_listener << why.str();
  return close;
}

MATCHER_P(TensorEq, expected, "is a tensor equal to the expected one (shape, dtype, values)") {
  std::ostringstream why;
  const bool equal = TensorsEqual(arg, expected, &why);
  *result_listener << why.str();
  return equal;
}

}  // namespace test
}  // namespace kd

#endif  // LIBKD_TESTING_TENSOR_MATCHERS_H_
