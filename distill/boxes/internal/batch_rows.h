// Rows of a batch, for the teacher cache: a batch restricted to some of its rows, several
// batches as one, and a supplementary tensor's values.
#ifndef LIBKD_DISTILL_BOXES_INTERNAL_BATCH_ROWS_H_
#define LIBKD_DISTILL_BOXES_INTERNAL_BATCH_ROWS_H_

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "distill/data/batch.h"

namespace kd {
namespace boxes_internal {

// The rows in dimension 0 of a batch's samples (a tensor), else 0.
int64_t BatchRows(const Batch& batch);

// `batch` restricted to `rows` (int64 indices): samples, targets and every supp tensor with the
// batch's rows in dimension 0 selected; anything else as it is.
Batch SelectRows(const Batch& batch, const at::Tensor& rows);

// The batches' rows as one batch, in order: samples, targets and supp tensors with their
// batch's rows in dimension 0 concatenated; anything else the first batch's. Batches of tensor
// samples, at least one.
Batch ConcatRows(const std::vector<const Batch*>& batches);

// The batch's supp tensor `key` as int64 values, one per row, or NotFound naming it.
absl::StatusOr<std::vector<int64_t>> SuppValues(const Batch& batch, const char* key, int64_t rows);

}  // namespace boxes_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_INTERNAL_BATCH_ROWS_H_
