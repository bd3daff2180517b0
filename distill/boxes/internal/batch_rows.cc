#include "distill/boxes/internal/batch_rows.h"

#include <functional>
#include <string>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"

namespace kd {
namespace boxes_internal {
namespace {

bool IsRows(const c10::IValue& value, int64_t rows) {
  return value.isTensor() && value.toTensor().dim() > 0 && value.toTensor().size(0) == rows;
}

// Where a value is in a batch: its samples, its targets, or the supp dict's entry `key`.
struct Place {
  enum { kSamples, kTargets, kSupp } what;
  c10::IValue key;
};

// The value at `place` of `batch` (None where it has none).
c10::IValue ValueAt(const Batch& batch, const Place& place) {
  if (place.what == Place::kSamples) return batch.samples;
  if (place.what == Place::kTargets) return batch.targets;
  if (!batch.supp.isGenericDict()) return c10::IValue();
  const auto dict = batch.supp.toGenericDict();
  const auto it = dict.find(place.key);
  return it == dict.end() ? c10::IValue() : it->value();
}

// `batch` with each value that holds its `rows` rows replaced by what `rowwise` makes of it.
Batch MapRows(const Batch& batch, int64_t rows,
              const std::function<at::Tensor(const at::Tensor&, const Place&)>& rowwise) {
  auto map = [&](const c10::IValue& value, const Place& place) {
    return IsRows(value, rows) ? c10::IValue(rowwise(value.toTensor(), place)) : value;
  };
  Batch out{map(batch.samples, {Place::kSamples, {}}), map(batch.targets, {Place::kTargets, {}}),
            batch.supp};
  if (batch.supp.isGenericDict()) {
    c10::impl::GenericDict supp(c10::StringType::get(), c10::AnyType::get());
    for (const auto& entry : batch.supp.toGenericDict()) {
      supp.insert(entry.key(), map(entry.value(), {Place::kSupp, entry.key()}));
    }
    out.supp = supp;
  }
  return out;
}

}  // namespace

int64_t BatchRows(const Batch& batch) {
  return batch.samples.isTensor() && batch.samples.toTensor().dim() > 0
             ? batch.samples.toTensor().size(0)
             : 0;
}

Batch SelectRows(const Batch& batch, const at::Tensor& rows) {
  return MapRows(batch, BatchRows(batch), [&](const at::Tensor& t, const Place&) {
    return t.index_select(0, rows.to(t.device()));
  });
}

Batch ConcatRows(const std::vector<const Batch*>& batches) {
  if (batches.size() == 1) return *batches[0];
  return MapRows(*batches[0], BatchRows(*batches[0]),
                 [&](const at::Tensor& first, const Place& place) {
                   std::vector<at::Tensor> parts = {first};
                   for (size_t b = 1; b < batches.size(); ++b) {
                     const c10::IValue value = ValueAt(*batches[b], place);
                     TORCH_CHECK(IsRows(value, BatchRows(*batches[b])), "ConcatRows: batch ", b,
                                 " lacks a value of its rows where the first batch has one");
                     parts.push_back(value.toTensor());
                   }
                   return at::cat(parts);
                 });
}

absl::StatusOr<std::vector<int64_t>> SuppValues(const Batch& batch, const char* key, int64_t rows) {
  if (batch.supp.isGenericDict()) {
    const auto dict = batch.supp.toGenericDict();
    const auto it = dict.find(key);
    if (it != dict.end() && it->value().isTensor()) {
      const at::Tensor t = it->value().toTensor().to(at::kCPU, at::kLong).contiguous();
      if (t.dim() == 1 && t.size(0) == rows) {
        return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + rows);
      }
    }
  }
  return absl::NotFoundError(
      absl::StrCat("teacher_cache: the batch has no supplementary \"", key, "\" of its ", rows,
                   " rows: the cache keys on each sample's dataset index and transform (Dataset::"
                   "NumTransforms); set the stage's teacher_cache { mode: OFF }"));
}

}  // namespace boxes_internal
}  // namespace kd
