#include "hooks/internal/recorded_values.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/ivalue_util.h"
#include "base/nearest.h"

namespace kd {
namespace hooks_internal {

c10::IValue Gather(const std::vector<c10::IValue>& values, c10::Device device) {
  const c10::IValue& first = values.front();
  if (first.isTensor()) {
    std::vector<at::Tensor> parts;
    for (const c10::IValue& v : values) parts.push_back(v.toTensor().to(device));
    return at::cat(parts, 0);
  }
  if (first.isTuple()) {
    std::vector<c10::IValue> gathered;
    for (size_t i = 0; i < first.toTupleRef().elements().size(); ++i) {
      std::vector<c10::IValue> column;
      for (const c10::IValue& v : values) column.push_back(v.toTupleRef().elements()[i]);
      gathered.push_back(Gather(column, device));
    }
    return c10::ivalue::Tuple::create(std::move(gathered));
  }
  return ToDevice(values.back(), device);
}

absl::StatusOr<c10::IValue> CombineCalls(std::vector<c10::IValue> values, CombineOptions how,
                                         absl::string_view key, absl::string_view io_type) {
  if (!how.accumulates) return values.back();
  if (!how.stacks_accumulated) {
    c10::impl::GenericList list(c10::AnyType::get());
    for (c10::IValue& v : values) list.push_back(std::move(v));
    return c10::IValue(list);
  }
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& v : values) {
    if (!v.isTensor()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot stack the accumulated ", io_type, " of ", QuoteName(key), ": a call gave a ",
          v.tagKind(), ", not a tensor; drop stacks_accumulated for this hook"));
    }
    tensors.push_back(v.toTensor());
  }
  for (const at::Tensor& t : tensors) {
    if (!t.sizes().equals(tensors.front().sizes())) {
      std::vector<std::string> shapes;
      for (const at::Tensor& s : tensors) shapes.push_back(ShapeString(s));
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot stack the accumulated ", io_type, " of ", QuoteName(key), ": shapes differ (",
          absl::StrJoin(shapes, ", "), "); drop stacks_accumulated or keep the shapes equal"));
    }
  }
  return c10::IValue(at::stack(tensors, 0));
}

}  // namespace hooks_internal
}  // namespace kd
