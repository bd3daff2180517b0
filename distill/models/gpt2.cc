// GPT-2 as transformers' GPT2LMHeadModel builds it: learned positions, pre-LayerNorm blocks,
// Conv1D projections (weights stored [in, out], the transpose of a Linear's), the tanh GELU
// ("gelu_new"), dropout on embeddings, attention and residuals, lm_head tied to wte. Every
// submodule runs through a hook point under transformers' name.
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
#include <torch/nn/modules/normalization.h>

#include "distill/models/causal_lm.h"
#include "distill/models/internal/lm_layers.h"
#include "hooks/hook_point.h"
#include "hooks/native_model.h"

namespace kd {
namespace models_internal {
namespace {

namespace nn = torch::nn;

// transformers' Conv1D: y = x @ weight + bias, weight [in, out].
struct Conv1DImpl : nn::Module {
  Conv1DImpl(int64_t in, int64_t out)
      : weight(register_parameter("weight", at::empty({in, out}))),
        bias(register_parameter("bias", at::zeros({out}))) {}
  at::Tensor forward(const at::Tensor& x) { return at::matmul(x, weight) + bias; }
  at::Tensor weight, bias;
};
TORCH_MODULE(Conv1D);

struct Gpt2AttentionImpl : nn::Module {
  Gpt2AttentionImpl(const CausalLmConfig& c, int64_t layer)
      : layer(layer),
        heads(c.num_attention_heads),
        head_dim(c.head_dim),
        dropout(c.dropout),
        c_attn(register_module("c_attn", Conv1D(c.hidden_size, 3 * c.hidden_size))),
        c_proj(register_module("c_proj", Conv1D(c.hidden_size, c.hidden_size))),
        resid_dropout(register_module("resid_dropout", nn::Dropout(c.dropout))) {}

  at::Tensor forward(const at::Tensor& x, const at::Tensor& key_mask, KvCache* cache) {
    const int64_t b = x.size(0), t = x.size(1);
    const std::vector<at::Tensor> qkv = Call(c_attn, x).split(x.size(2), 2);
    auto split = [&](const at::Tensor& y) {
      return y.view({b, t, heads, head_dim}).transpose(1, 2);
    };
    auto [k, v] = CacheKeysValues(cache, layer, split(qkv[1]), split(qkv[2]));
    const double p = is_training() ? dropout : 0.0;
    const at::Tensor out = Attend(split(qkv[0]), k, v, key_mask, 1.0 / std::sqrt(head_dim), p);
    return Call(resid_dropout, Call(c_proj, out));
  }

  int64_t layer, heads, head_dim;
  double dropout;
  Conv1D c_attn, c_proj;
  nn::Dropout resid_dropout;
};
TORCH_MODULE(Gpt2Attention);

struct Gpt2MlpImpl : nn::Module {
  explicit Gpt2MlpImpl(const CausalLmConfig& c)
      : c_fc(register_module("c_fc", Conv1D(c.hidden_size, c.intermediate_size))),
        c_proj(register_module("c_proj", Conv1D(c.intermediate_size, c.hidden_size))),
        dropout(register_module("dropout", nn::Dropout(c.dropout))) {}

  at::Tensor forward(const at::Tensor& x) {
    return Call(dropout, Call(c_proj, at::gelu(Call(c_fc, x), "tanh")));
  }

  Conv1D c_fc, c_proj;
  nn::Dropout dropout;
};
TORCH_MODULE(Gpt2Mlp);

nn::LayerNorm LayerNorm(const CausalLmConfig& c) {
  return nn::LayerNorm(nn::LayerNormOptions({c.hidden_size}).eps(c.norm_eps));
}

struct Gpt2BlockImpl : nn::Module, CheckpointedLayer {
  Gpt2BlockImpl(const CausalLmConfig& c, int64_t layer)
      : ln_1(register_module("ln_1", LayerNorm(c))),
        attn(register_module("attn", Gpt2Attention(c, layer))),
        ln_2(register_module("ln_2", LayerNorm(c))),
        mlp(register_module("mlp", Gpt2Mlp(c))) {}

  // extras: the key mask (undefined: none).
  at::Tensor Run(const at::Tensor& x, const std::vector<at::Tensor>& extras) override {
    const at::Tensor h = x + Call(attn, Call(ln_1, x), extras[0], cache);
    return h + Call(mlp, Call(ln_2, h));
  }
  at::Tensor forward(at::Tensor x, bool checkpoint, std::vector<at::Tensor> extras) {
    return RunLayer(*this, checkpoint, x, extras);
  }

  nn::LayerNorm ln_1;
  Gpt2Attention attn;
  nn::LayerNorm ln_2;
  Gpt2Mlp mlp;
  KvCache* cache = nullptr;  // set by the model for the call
};
TORCH_MODULE(Gpt2Block);

// A decoder layer runs on its own (Model::Submodel: blockwise distillation feeds a student layer
// the teacher layer's captured inputs).
const bool kGpt2BlockRunsAlone = [] {
  RegisterNativeModuleForward<Gpt2BlockImpl>();
  return true;
}();

struct Gpt2ModelImpl : nn::Module {
  explicit Gpt2ModelImpl(const CausalLmConfig& c)
      : wte(register_module("wte", nn::Embedding(c.vocab_size, c.hidden_size))),
        wpe(register_module("wpe", nn::Embedding(c.max_position_embeddings, c.hidden_size))),
        drop(register_module("drop", nn::Dropout(c.dropout))),
        h(register_module("h", nn::ModuleList())),
        ln_f(register_module("ln_f", LayerNorm(c))),
        checkpoint(c.gradient_checkpointing) {
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) h->push_back(Gpt2Block(c, i));
  }

  at::Tensor forward(const LmInputs& in) {
    at::Tensor x = Call(drop, Call(wte, in.input_ids) + Call(wpe, PositionIds(in)));
    const at::Tensor mask = KeyMask(in);
    for (const auto& module : *h) {
      auto* block = module->as<Gpt2BlockImpl>();
      block->cache = in.cache;
      x = Call(block, x, checkpoint && is_training(), std::vector<at::Tensor>{mask});
      block->cache = nullptr;
    }
    return Call(ln_f, x);
  }

  nn::Embedding wte, wpe;
  nn::Dropout drop;
  nn::ModuleList h;
  nn::LayerNorm ln_f;
  bool checkpoint;
};
TORCH_MODULE(Gpt2Model);

class Gpt2LmHeadModel final : public CausalLm {
 public:
  explicit Gpt2LmHeadModel(const CausalLmConfig& c)
      : CausalLm(c),
        transformer_(register_module("transformer", Gpt2Model(c))),
        lm_head_(*this, c, transformer_->wte) {}

  at::Tensor Logits(const LmInputs& inputs) override {
    return lm_head_(Call(transformer_, inputs));
  }

 private:
  Gpt2Model transformer_;
  LmHead lm_head_;
};

}  // namespace

std::shared_ptr<CausalLm> MakeGpt2(const CausalLmConfig& config) {
  auto lm = std::make_shared<Gpt2LmHeadModel>(config);
  InitLinearAndEmbedding(*lm, 0.02);
  at::NoGradGuard no_grad;
  for (const auto& item : lm->named_parameters()) {
    const std::string& name = item.key();
    at::Tensor p = item.value();
    // transformers' GPT-2 init: Conv1D weights normal(0, 0.02), the residual projections'
    // scaled by 1/sqrt(2 * n_layer).
    if (name.size() > 7 && name.substr(name.size() - 7) == ".weight" && p.dim() == 2 &&
        name.find(".c_") != std::string::npos) {
      const bool residual = name.find("c_proj") != std::string::npos;
      p.normal_(0.0, residual ? 0.02 / std::sqrt(2.0 * config.num_hidden_layers) : 0.02);
    }
  }
  return lm;
}

}  // namespace models_internal
}  // namespace kd
