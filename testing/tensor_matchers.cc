#include "testing/tensor_matchers.h"

#include <algorithm>
#include <string>
#include <vector>

#include <ATen/ATen.h>

namespace kd {
namespace test {
namespace {

std::vector<c10::IValue> Elements(const c10::IValue& v) {
  if (v.isTuple()) return v.toTupleRef().elements().vec();
  return v.toListRef().vec();
}

}  // namespace

bool IValuesClose(const c10::IValue& actual, const c10::IValue& expected, double atol,
                  std::ostream* why) {
  if (expected.isTensor()) {
    if (!actual.isTensor()) {
      *why << "expected a tensor, got " << actual.tagKind();
      return false;
    }
    const at::Tensor a = actual.toTensor(), e = expected.toTensor();
    if (!a.sizes().equals(e.sizes())) {
      *why << "shape " << a.sizes() << " != expected " << e.sizes();
      return false;
    }
    if (!at::allclose(a.to(e.dtype()), e, /*rtol=*/0, atol)) {
      *why << "max abs difference " << (a.to(e.dtype()) - e).abs().max().item<double>() << " > "
           << atol;
      return false;
    }
    return true;
  }
  if (expected.isTuple() || expected.isList()) {
    if (!actual.isTuple() && !actual.isList()) {
      *why << "expected a sequence, got " << actual.tagKind();
      return false;
    }
    const std::vector<c10::IValue> a = Elements(actual), e = Elements(expected);
    if (a.size() != e.size()) {
      *why << "length " << a.size() << " != expected " << e.size();
      return false;
    }
    for (size_t i = 0; i < a.size(); ++i) {
      std::ostringstream inner;
      if (!IValuesClose(a[i], e[i], atol, &inner)) {
        *why << "at element " << i << ": " << inner.str();
        return false;
      }
    }
    return true;
  }
  if (actual != expected) {
    *why << actual << " != expected " << expected;
    return false;
  }
  return true;
}

bool TensorsEqual(const at::Tensor& actual, const at::Tensor& expected, std::ostream* why) {
  if (!actual.sizes().equals(expected.sizes())) {
    *why << "shape " << actual.sizes() << " != expected " << expected.sizes();
    return false;
  }
  if (actual.scalar_type() != expected.scalar_type()) {
    *why << "dtype " << actual.scalar_type() << " != expected " << expected.scalar_type();
    return false;
  }
  if (!at::equal(actual.nan_to_num(0), expected.nan_to_num(0)) ||
      !at::equal(actual.isnan(), expected.isnan())) {
    *why << "values differ; max abs difference "
         << (actual.to(at::kDouble) - expected.to(at::kDouble))
                .abs()
                .nan_to_num(0)
                .max()
                .item<double>();
    return false;
  }
  return true;
}

void ExpectNearScale(const at::Tensor& actual, const at::Tensor& expected, const std::string& what,
                     double rel) {
  ASSERT_TRUE(actual.defined()) << what;
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const double scale = std::max(1e-3, expected.abs().max().item<double>());
  const double diff = (actual - expected).abs().max().item<double>();
  EXPECT_LE(diff, rel * scale) << what << ": max difference " << diff << " at scale " << scale;
}

}  // namespace test
}  // namespace kd
