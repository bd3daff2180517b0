// transformers' causal-LM convention, in one place: the logits at position t are scored against
// the label at t + 1 (labels are the input ids, -100 where no loss is taken), so a window of T
// tokens gives T - 1 predictions. The loss (CausalLMLoss), the models' own NextTokenLoss, the
// LM metrics and a box's evaluation all shift through NextTokenLabels.
#ifndef LIBKD_DISTILL_MODELS_NEXT_TOKEN_H_
#define LIBKD_DISTILL_MODELS_NEXT_TOKEN_H_

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace kd {

// The label each position predicts: labels (B, T) shifted left by one, `ignore_index` at the
// last position. int64 (B, T).
at::Tensor NextTokenLabels(const at::Tensor& labels, int64_t ignore_index = -100);

// transformers' ForCausalLMLoss: the mean cross-entropy of logits (B, T, V), in float32, against
// NextTokenLabels(labels) over the positions whose next label is not `ignore_index`.
at::Tensor NextTokenLoss(const at::Tensor& logits, const at::Tensor& labels,
                         int64_t ignore_index = -100);

}  // namespace kd

#endif  // LIBKD_DISTILL_MODELS_NEXT_TOKEN_H_
