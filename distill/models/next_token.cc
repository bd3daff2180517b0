#include "distill/models/next_token.h"

#include <ATen/ATen.h>

namespace kd {

at::Tensor NextTokenLabels(const at::Tensor& labels, int64_t ignore_index) {
  return at::constant_pad_nd(labels, {0, 1}, ignore_index).narrow(1, 1, labels.size(1));
}

at::Tensor NextTokenLoss(const at::Tensor& logits, const at::Tensor& labels,
                         int64_t ignore_index) {
  return at::cross_entropy_loss(logits.to(at::kFloat).reshape({-1, logits.size(-1)}),
                                NextTokenLabels(labels, ignore_index).reshape({-1}), {},
                                at::Reduction::Mean, ignore_index);
}

}  // namespace kd
