// The pieces the causal LMs share (distill/models/causal_lm.h): RMSNorm, rotary embeddings,
// attention over a mask and a KV cache, a tied output layer, transformers' initialization.
#ifndef LIBKD_DISTILL_MODELS_INTERNAL_LM_LAYERS_H_
#define LIBKD_DISTILL_MODELS_INTERNAL_LM_LAYERS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include "distill/models/causal_lm.h"

namespace kd {
namespace models_internal {

// transformers' LlamaRMSNorm: x / sqrt(mean(x^2) + eps) computed in float32, times the weight.
struct RmsNormImpl : torch::nn::Module {
  RmsNormImpl(int64_t size, double eps)
      : weight(register_parameter("weight", at::ones({size}))), eps(eps) {}
  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor h = x.to(at::kFloat);
    return weight * (h * at::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps)).to(x.scalar_type());
  }
  at::Tensor weight;
  double eps;
};
TORCH_MODULE(RmsNorm);

// The output layer of a model with tie_word_embeddings: the input embedding's weight, no
// parameter of its own (a hook on "lm_head" still fires).
struct TiedLinearImpl : torch::nn::Module {
  explicit TiedLinearImpl(torch::nn::Embedding embedding) : embedding(std::move(embedding)) {}
  at::Tensor forward(const at::Tensor& x) { return at::linear(x, embedding->weight); }
  torch::nn::Embedding embedding;  // not registered: its weight belongs to the input layer
};
TORCH_MODULE(TiedLinear);

// The output layer, registered on `owner` as "lm_head": a Linear without bias, or with
// tie_word_embeddings a TiedLinear over `embedding`.
class LmHead {
 public:
  LmHead(torch::nn::Module& owner, const CausalLmConfig& config,
         const torch::nn::Embedding& embedding);
  // The logits of the final hidden states `h`, through the head's hook point.
  at::Tensor operator()(const at::Tensor& h);

 private:
  torch::nn::Linear linear_{nullptr};
  TiedLinear tied_{nullptr};
};

// Rotary embeddings' cos and sin for `positions` (int64 [B, T]), each [B, T, head_dim], as
// transformers' LlamaRotaryEmbedding (inverse frequencies theta^(-2i/d), the halves repeated).
std::pair<at::Tensor, at::Tensor> RotaryCosSin(const at::Tensor& inv_freq,
                                               const at::Tensor& positions, at::ScalarType dtype);
at::Tensor RotaryInverseFrequencies(int64_t head_dim, double theta);
// q * cos + rotate_half(q) * sin, with cos and sin [B, T, D] broadcast over the heads.
at::Tensor ApplyRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// The positions of `inputs`' tokens: given, else the cache's length onwards ([B, T]).
at::Tensor PositionIds(const LmInputs& inputs);

// The key mask Attend takes for `inputs`: its attention_mask, or undefined where there is none or
// it masks nothing (attention then takes SDPA's causal path).
at::Tensor KeyMask(const LmInputs& inputs);

// Scaled dot-product attention of q [B, H, T, D] over k, v [B, KV, S, D] (S: the cache's tokens
// and these; KV divides H, grouped-query attention), causal, with `key_mask` ([B, S], 1 attend,
// 0 padding; undefined: none). A query whose every key is masked (left padding) attends to its
// own position, so that no row is NaN. Returns [B, T, H * D].
at::Tensor Attend(const at::Tensor& q, at::Tensor k, at::Tensor v, const at::Tensor& key_mask,
                  double scale, double dropout);

// k and v appended to layer `layer` of `cache` (if any): the keys and values to attend over.
std::pair<at::Tensor, at::Tensor> CacheKeysValues(KvCache* cache, int64_t layer, at::Tensor k,
                                                  at::Tensor v);

// transformers' _init_weights for these models: normal(0, std) weights of Linear and Embedding,
// zero biases (norms keep their ones).
void InitLinearAndEmbedding(torch::nn::Module& module, double std);

// A decoder layer: its hidden states out of `x` and the tensors the model passes every layer
// (rotary tables, the key mask), which need no gradient.
class CheckpointedLayer {
 public:
  virtual ~CheckpointedLayer() = default;
  virtual at::Tensor Run(const at::Tensor& x, const std::vector<at::Tensor>& extras) = 0;
};

// layer.Run(x, extras), its activations recomputed in backward instead of kept
// (gradient_checkpointing) when `checkpoint` and grad mode are on.
at::Tensor RunLayer(CheckpointedLayer& layer, bool checkpoint, const at::Tensor& x,
                    const std::vector<at::Tensor>& extras);

}  // namespace models_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_MODELS_INTERNAL_LM_LAYERS_H_
