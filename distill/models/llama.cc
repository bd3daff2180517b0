// The Llama family as transformers' LlamaForCausalLM and Qwen2ForCausalLM build it: RMSNorm,
// rotary embeddings, grouped-query attention, the SwiGLU MLP, an optional tied lm_head; Qwen2
// adds biases to q/k/v. Every submodule runs through a hook point under transformers' name.
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include "distill/models/causal_lm.h"
#include "distill/models/internal/lm_layers.h"
#include "hooks/hook_point.h"
#include "hooks/native_model.h"

namespace kd {
namespace models_internal {
namespace {

namespace nn = torch::nn;

nn::Linear Linear(int64_t in, int64_t out, bool bias) {
  return nn::Linear(nn::LinearOptions(in, out).bias(bias));
}

struct LlamaAttentionImpl : nn::Module {
  LlamaAttentionImpl(const CausalLmConfig& c, int64_t layer)
      : layer(layer), head_dim(c.head_dim), dropout(c.dropout) {
    const bool qkv_bias = c.attention_bias || c.architecture == "qwen2";
    const bool o_bias = c.attention_bias && c.architecture != "qwen2";
    q_proj = register_module("q_proj",
                             Linear(c.hidden_size, c.num_attention_heads * head_dim, qkv_bias));
    k_proj = register_module("k_proj",
                             Linear(c.hidden_size, c.num_key_value_heads * head_dim, qkv_bias));
    v_proj = register_module("v_proj",
                             Linear(c.hidden_size, c.num_key_value_heads * head_dim, qkv_bias));
    o_proj =
        register_module("o_proj", Linear(c.num_attention_heads * head_dim, c.hidden_size, o_bias));
  }

  // x [B, T, hidden]; cos, sin [B, T, head_dim]; key_mask [B, S] or undefined.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const at::Tensor& key_mask, KvCache* cache) {
    const int64_t b = x.size(0), t = x.size(1);
    auto heads = [&](nn::Linear& proj) {
      return Call(proj, x).view({b, t, -1, head_dim}).transpose(1, 2);
    };
    const at::Tensor q = ApplyRotary(heads(q_proj), cos, sin);
    auto [k, v] =
        CacheKeysValues(cache, layer, ApplyRotary(heads(k_proj), cos, sin), heads(v_proj));
    const double p = is_training() ? dropout : 0.0;
    return Call(o_proj, Attend(q, k, v, key_mask, 1.0 / std::sqrt(head_dim), p));
  }

  int64_t layer, head_dim;
  double dropout;
  nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
};
TORCH_MODULE(LlamaAttention);

struct LlamaMlpImpl : nn::Module {
  explicit LlamaMlpImpl(const CausalLmConfig& c)
      : gate_proj(
            register_module("gate_proj", Linear(c.hidden_size, c.intermediate_size, c.mlp_bias))),
        up_proj(register_module("up_proj", Linear(c.hidden_size, c.intermediate_size, c.mlp_bias))),
        down_proj(
            register_module("down_proj", Linear(c.intermediate_size, c.hidden_size, c.mlp_bias))) {}

  at::Tensor forward(const at::Tensor& x) {
    return Call(down_proj, at::silu(Call(gate_proj, x)) * Call(up_proj, x));
  }

  nn::Linear gate_proj, up_proj, down_proj;
};
TORCH_MODULE(LlamaMlp);

struct LlamaDecoderLayerImpl : nn::Module, CheckpointedLayer {
  LlamaDecoderLayerImpl(const CausalLmConfig& c, int64_t layer)
      : self_attn(register_module("self_attn", LlamaAttention(c, layer))),
        mlp(register_module("mlp", LlamaMlp(c))),
        input_layernorm(register_module("input_layernorm", RmsNorm(c.hidden_size, c.norm_eps))),
        post_attention_layernorm(
            register_module("post_attention_layernorm", RmsNorm(c.hidden_size, c.norm_eps))) {}

  // extras: cos, sin and the key mask (undefined: none).
  at::Tensor Run(const at::Tensor& x, const std::vector<at::Tensor>& extras) override {
    const at::Tensor h =
        x + Call(self_attn, Call(input_layernorm, x), extras[0], extras[1], extras[2], cache);
    return h + Call(mlp, Call(post_attention_layernorm, h));
  }
  // The layer's output as transformers' LlamaDecoderLayer returns it (a hook on
  // "model.layers.<i>" records the hidden states).
  at::Tensor forward(at::Tensor x, bool checkpoint, std::vector<at::Tensor> extras) {
    return RunLayer(*this, checkpoint, x, extras);
  }

  LlamaAttention self_attn;
  LlamaMlp mlp;
  RmsNorm input_layernorm, post_attention_layernorm;
  KvCache* cache = nullptr;  // set by the model for the call
};
TORCH_MODULE(LlamaDecoderLayer);

// A decoder layer runs on its own (Model::Submodel: blockwise distillation feeds a student layer
// the teacher layer's captured inputs).
const bool kLlamaDecoderLayerRunsAlone = [] {
  RegisterNativeModuleForward<LlamaDecoderLayerImpl>();
  return true;
}();

struct LlamaModelImpl : nn::Module {
  explicit LlamaModelImpl(const CausalLmConfig& c)
      : embed_tokens(register_module("embed_tokens", nn::Embedding(c.vocab_size, c.hidden_size))),
        layers(register_module("layers", nn::ModuleList())),
        norm(register_module("norm", RmsNorm(c.hidden_size, c.norm_eps))),
        // transformers keeps it as a non-persistent buffer: in no state dict.
        inv_freq(RotaryInverseFrequencies(c.head_dim, c.rope_theta)),
        checkpoint(c.gradient_checkpointing) {
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(LlamaDecoderLayer(c, i));
  }

  // The final hidden states [B, T, hidden] of `in`.
  at::Tensor forward(const LmInputs& in) {
    at::Tensor h = Call(embed_tokens, in.input_ids);
    auto [cos, sin] = RotaryCosSin(inv_freq, PositionIds(in), h.scalar_type());
    const at::Tensor mask = KeyMask(in);
    for (const auto& module : *layers) {
      auto* layer = module->as<LlamaDecoderLayerImpl>();
      layer->cache = in.cache;
      h = Call(layer, h, checkpoint && is_training(), std::vector<at::Tensor>{cos, sin, mask});
      layer->cache = nullptr;
    }
    return Call(norm, h);
  }

  nn::Embedding embed_tokens;
  nn::ModuleList layers;
  RmsNorm norm;
  at::Tensor inv_freq;
  bool checkpoint;
};
TORCH_MODULE(LlamaModel);

class LlamaForCausalLm final : public CausalLm {
 public:
  explicit LlamaForCausalLm(const CausalLmConfig& c)
      : CausalLm(c),
        model_(register_module("model", LlamaModel(c))),
        lm_head_(*this, c, model_->embed_tokens) {}

  at::Tensor Logits(const LmInputs& inputs) override { return lm_head_(Call(model_, inputs)); }

 private:
  LlamaModel model_;
  LmHead lm_head_;
};

}  // namespace

std::shared_ptr<CausalLm> MakeLlama(const CausalLmConfig& config) {
  auto lm = std::make_shared<LlamaForCausalLm>(config);
  InitLinearAndEmbedding(*lm, 0.02);
  return lm;
}

}  // namespace models_internal
}  // namespace kd
