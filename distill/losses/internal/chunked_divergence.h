// silverspoon-kd's chunk_size for its divergences (kl_divergence, jsd), computed so that it
// bounds memory in the backward pass too. silverspoon-kd's chunked loop still lets autograd keep
// every chunk's softmaxes for the backward, so the saved tensors add up to the unchunked ones;
// here the forward keeps nothing but its inputs, and the backward recomputes each chunk's
// softmaxes and writes that chunk's gradient, whose formula is closed:
//   KL:  dL/ds = T/N (p_s - p_t)                      dL/dt = T/N p_t (a - sum(p_t a)),
//        a = log p_t - log p_s
//   JSD: dL/ds = T/N p_s (b_s - sum(p_s b_s))        dL/dt = T/N p_t (b_t - sum(p_t b_t)),
//        b_s = (1 - beta)(log p_s - log m), b_t = beta (log p_t - log m), m = beta p_t + (1 - beta)
//        p_s
// (p = softmax(x / T) per token in float32, N tokens). The values equal the unchunked
// computation up to float32 summation order (tested, with the gradients); memory beyond the
// inputs and their gradients is a few (chunk, V) float tensors (loss_benchmark's
// BM_DivergencePeakMemory measures it). Not twice differentiable.
#ifndef LIBKD_DISTILL_LOSSES_INTERNAL_CHUNKED_DIVERGENCE_H_
#define LIBKD_DISTILL_LOSSES_INTERNAL_CHUNKED_DIVERGENCE_H_

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace kd {
namespace losses_internal {

// T^2 / N * sum over tokens of KL(p_t || p_s), the last dimension the vocabulary, every other
// flattened into N tokens, computed `chunk` tokens at a time (chunk >= 1). A float32 scalar.
at::Tensor ChunkedKlDivergence(const at::Tensor& student, const at::Tensor& teacher,
                               double temperature, int64_t chunk);

// T^2 / N * sum over tokens of beta KL(p_t || m) + (1 - beta) KL(p_s || m), m = beta p_t +
// (1 - beta) p_s, computed `chunk` tokens at a time. A float32 scalar; 0 < beta < 1.
at::Tensor ChunkedJsd(const at::Tensor& student, const at::Tensor& teacher, double temperature,
                      double beta, int64_t chunk);

}  // namespace losses_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_LOSSES_INTERNAL_CHUNKED_DIVERGENCE_H_
