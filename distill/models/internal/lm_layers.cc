#include "distill/models/internal/lm_layers.h"

#include <cmath>
#include <optional>
#include <vector>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/init.h>

#include "hooks/hook_point.h"

namespace kd {
namespace models_internal {

LmHead::LmHead(torch::nn::Module& owner, const CausalLmConfig& config,
               const torch::nn::Embedding& embedding) {
  if (config.tie_word_embeddings) {
    tied_ = owner.register_module("lm_head", TiedLinear(embedding));
  } else {
    linear_ = owner.register_module(
        "lm_head", torch::nn::Linear(torch::nn::LinearOptions(config.hidden_size,
                                                              config.vocab_size)
                                         .bias(false)));
  }
}

at::Tensor LmHead::operator()(const at::Tensor& h) {
  return tied_ ? Call(tied_, h) : Call(linear_, h);
}

at::Tensor RotaryInverseFrequencies(int64_t head_dim, double theta) {
  // As transformers: 1 / theta^(arange(0, d, 2) / d), in float32.
  const at::Tensor exponents =
      at::arange(0, head_dim, 2, at::TensorOptions().dtype(at::kLong)).to(at::kFloat) /
      static_cast<double>(head_dim);
  return 1.0 / at::pow(theta, exponents);
}

std::pair<at::Tensor, at::Tensor> RotaryCosSin(const at::Tensor& inv_freq,
                                               const at::Tensor& positions, at::ScalarType dtype) {
  const at::Tensor freqs =
      positions.unsqueeze(-1).to(at::kFloat) * inv_freq.to(positions.device(), at::kFloat);
  const at::Tensor emb = at::cat({freqs, freqs}, -1);
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

at::Tensor ApplyRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1);
}

at::Tensor PositionIds(const LmInputs& inputs) {
  if (inputs.position_ids.defined()) return inputs.position_ids;
  const int64_t past = inputs.cache != nullptr ? inputs.cache->length() : 0;
  const int64_t t = inputs.input_ids.size(1);
  return at::arange(past, past + t, inputs.input_ids.options().dtype(at::kLong))
      .unsqueeze(0)
      .expand({inputs.input_ids.size(0), t});
}

at::Tensor KeyMask(const LmInputs& inputs) {
  const at::Tensor& mask = inputs.attention_mask;
  return mask.defined() && !mask.all().item<bool>() ? mask : at::Tensor();
}

std::pair<at::Tensor, at::Tensor> CacheKeysValues(KvCache* cache, int64_t layer, at::Tensor k,
                                                  at::Tensor v) {
  if (cache == nullptr) return {std::move(k), std::move(v)};
  if (static_cast<int64_t>(cache->keys.size()) <= layer) {
    cache->keys.resize(layer + 1);
    cache->values.resize(layer + 1);
  }
  at::Tensor& keys = cache->keys[layer];
  at::Tensor& values = cache->values[layer];
  keys = keys.defined() ? at::cat({keys, k}, 2) : k;
  values = values.defined() ? at::cat({values, v}, 2) : v;
  return {keys, values};
}

at::Tensor Attend(const at::Tensor& q, at::Tensor k, at::Tensor v, const at::Tensor& key_mask,
                  double scale, double dropout) {
  const int64_t b = q.size(0), heads = q.size(1), kv_heads = k.size(1), d = q.size(3);
  const int64_t t = q.size(2), s = k.size(2), groups = heads / kv_heads;
  at::Tensor out;
  if (!key_mask.defined() && t == s) {
    // SDPA's grouped-query attention: no copies of the keys and values (transformers' sdpa
    // path does the same where there is no mask).
    out = at::scaled_dot_product_attention(q, k, v, {}, dropout, /*is_causal=*/true, scale,
                                           /*enable_gqa=*/groups > 1);
  } else if (t == 1) {
    // One new token (generation): it sees every key, so a group's queries can stand as rows
    // of one query per key/value head (transformers' pack_gqa).
    std::optional<at::Tensor> mask;
    if (key_mask.defined()) mask = key_mask.to(at::kBool).view({b, 1, 1, s});
    out = at::scaled_dot_product_attention(q.reshape({b, kv_heads, groups, d}), k, v, mask,
                                           dropout, /*is_causal=*/false, scale)
              .reshape({b, heads, 1, d});
  } else {
    if (groups > 1) {  // transformers' repeat_kv
      k = k.repeat_interleave(groups, 1);
      v = v.repeat_interleave(groups, 1);
    }
    // Query i sits at position s - t + i: it sees the keys up to there, and no padding.
    const auto opts = q.options().dtype(at::kLong);
    const at::Tensor query_pos = at::arange(s - t, s, opts).unsqueeze(1);
    const at::Tensor key_pos = at::arange(0, s, opts).unsqueeze(0);
    at::Tensor mask = key_pos.le(query_pos).view({1, 1, t, s});  // [1, 1, T, S]
    if (key_mask.defined()) {
      mask = mask.logical_and(key_mask.to(at::kBool).view({b, 1, 1, s}));
      // A query with nothing to attend to (a left-padding position) attends to itself.
      const at::Tensor empty = mask.logical_not().all(-1, /*keepdim=*/true);
      mask = mask.logical_or(empty.logical_and(key_pos.eq(query_pos).view({1, 1, t, s})));
    }
    out = at::scaled_dot_product_attention(q, k, v, mask, dropout, /*is_causal=*/false, scale);
  }
  return out.transpose(1, 2).reshape({b, t, heads * d});
}

void InitLinearAndEmbedding(torch::nn::Module& module, double std) {
  at::NoGradGuard no_grad;
  for (const auto& child : module.modules(/*include_self=*/true)) {
    if (auto* linear = child->as<torch::nn::Linear>()) {
      linear->weight.normal_(0.0, std);
      if (linear->bias.defined()) linear->bias.zero_();
    } else if (auto* embedding = child->as<torch::nn::Embedding>()) {
      embedding->weight.normal_(0.0, std);
    }
  }
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The reentrant checkpoint of torch.utils.checkpoint: forward without keeping activations;
// backward re-runs the layer on the saved input, with the CPU generator's state of the first run
// (dropout draws the same masks), and backpropagates through it, which accumulates the layer's
// parameters' gradients as the plain run would. The layer is a module of the model, which
// outlives its graphs' backward; its other inputs (rotary tables, masks) need no gradient.
struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, variable_list extras,
                            CheckpointedLayer* layer) {
    ctx->saved_data["rng"] = at::detail::getDefaultCPUGenerator().get_state();
    ctx->saved_data["layer"] = reinterpret_cast<int64_t>(layer);
    extras.insert(extras.begin(), x);
    ctx->save_for_backward(extras);
    at::NoGradGuard no_grad;
    extras.erase(extras.begin());
    return layer->Run(x, extras);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    variable_list saved = ctx->get_saved_variables();
    const at::Tensor x = saved[0].detach().requires_grad_(true);
    saved.erase(saved.begin());
    auto* layer = reinterpret_cast<CheckpointedLayer*>(ctx->saved_data["layer"].toInt());
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    const at::Tensor rng_now = cpu.get_state();
    cpu.set_state(ctx->saved_data["rng"].toTensor());
    at::Tensor y;
    {
      at::AutoGradMode grad(true);
      y = layer->Run(x, saved);
    }
    cpu.set_state(rng_now);
    torch::autograd::backward({y}, {grad_out[0]});
    return {x.grad(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor RunLayer(CheckpointedLayer& layer, bool checkpoint, const at::Tensor& x,
                    const std::vector<at::Tensor>& extras) {
  if (!checkpoint || !at::GradMode::is_enabled()) return layer.Run(x, extras);
  return CheckpointFunction::apply(x, extras, &layer);
}

}  // namespace models_internal
}  // namespace kd
