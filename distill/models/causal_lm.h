// Causal language models as native, trainable, hookable torch::nn::Modules with Hugging Face's
// module paths: the Llama family ("llama"; Qwen2, "qwen2", is Llama with biases on q/k/v) and
// GPT-2 ("gpt2"). Hooks and configs written against the Python model carry over:
//
//   llama / qwen2: model.embed_tokens, model.layers.<i>.{input_layernorm, self_attn.{q,k,v,o}_proj,
//                  post_attention_layernorm, mlp.{gate,up,down}_proj}, model.norm, lm_head
//   gpt2:          transformer.{wte, wpe, h.<i>.{ln_1, attn.{c_attn, c_proj}, ln_2,
//                  mlp.{c_fc, c_proj}}, ln_f}, lm_head
//
// A model's forward takes input_ids (int64 [B, T]) and, optionally, attention_mask ([B, T], 1 for
// tokens, 0 for padding) and returns the logits (float [B, T, vocab]), as transformers'
// `model(input_ids, attention_mask=...).logits`. A tied lm_head (tie_word_embeddings) reads the
// input embedding's weight and holds no parameter of its own, as in transformers.
//
//   CausalLmConfig config = {.architecture = "llama", .vocab_size = 64, ...};
//   KD_ASSIGN_OR_RETURN(std::shared_ptr<CausalLm> lm, MakeCausalLm(config));
//   at::Tensor logits = lm->Logits({.input_ids = ids});
#ifndef LIBKD_DISTILL_MODELS_CAUSAL_LM_H_
#define LIBKD_DISTILL_MODELS_CAUSAL_LM_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "absl/status/statusor.h"
#include "hooks/model.h"

namespace kd {

// What a Hugging Face config.json says of a causal LM, as far as libkd's models read it (field
// names as transformers' LlamaConfig, Qwen2Config and GPT2Config; GPT-2's n_embd, n_layer,
// n_head, n_inner, n_positions and layer_norm_epsilon map onto these).
struct CausalLmConfig {
  std::string architecture;  // "llama", "qwen2" or "gpt2" (config.json's model_type)
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // 0 for GPT-2: 4 * hidden_size
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // 0: num_attention_heads
  int64_t head_dim = 0;             // 0: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;
  double norm_eps = 1e-6;           // rms_norm_eps (Llama), layer_norm_epsilon (GPT-2)
  double rope_theta = 10000.0;
  bool attention_bias = false;      // Llama's attention_bias (q/k/v/o); Qwen2: q/k/v always
  bool mlp_bias = false;
  bool tie_word_embeddings = false;
  std::string hidden_act = "silu";  // Llama: silu; GPT-2's activation_function: gelu_new
  double dropout = 0.0;             // attention_dropout (Llama), *_pdrop (GPT-2)
  std::optional<int64_t> bos_token_id, eos_token_id, pad_token_id;
  // Activation checkpointing of each decoder layer in training (transformers'
  // gradient_checkpointing_enable): the layer's activations recomputed in backward.
  bool gradient_checkpointing = false;
};

// The keys and values of every layer for the tokens seen so far (generation's KV cache).
struct KvCache {
  std::vector<at::Tensor> keys, values;  // per layer [B, kv_heads, S, head_dim]; empty at first
  int64_t length() const { return keys.empty() ? 0 : keys[0].size(2); }
};

struct LmInputs {
  at::Tensor input_ids;       // int64 [B, T]
  at::Tensor attention_mask;  // [B, T] (1 token, 0 padding) over the cache's tokens and these;
                              // undefined: every token attends to all before it
  at::Tensor position_ids;    // int64 [B, T]; undefined: the cache's length onwards
  KvCache* cache = nullptr;   // appended to; null: no cache
};

// A causal LM's torch::nn::Module: forward(input_ids) as transformers' model(input_ids), Logits()
// with a mask, positions or a cache. (MakeCausalLmModel wraps it as a kd::Model whose Forward
// also takes the attention mask.)
class CausalLm : public torch::nn::Module {
 public:
  explicit CausalLm(CausalLmConfig config) : config_(std::move(config)) {}
  const CausalLmConfig& config() const { return config_; }

  // The logits, float [B, T, vocab_size] (in autocast, its dtype).
  virtual at::Tensor Logits(const LmInputs& inputs) = 0;

  at::Tensor forward(at::Tensor input_ids) { return Logits({.input_ids = std::move(input_ids)}); }

 protected:
  CausalLmConfig config_;
};

// `config` checked (sizes positive, heads dividing the hidden size, key/value heads dividing the
// heads, a known architecture and activation) and completed (defaults of the zero fields).
absl::StatusOr<CausalLmConfig> CheckCausalLmConfig(CausalLmConfig config);

// A model of `config` (checked first) with transformers' initialization: normal(0,
// initializer_range 0.02) linear and embedding weights, zero biases, unit norms.
absl::StatusOr<std::shared_ptr<CausalLm>> MakeCausalLm(const CausalLmConfig& config);

// `lm` as a kd::Model (hooks by module path, the boxes): Forward(input_ids[, attention_mask]),
// the mask also as the kwarg "attention_mask"; returns the logits.
std::unique_ptr<Model> MakeCausalLmModel(std::shared_ptr<CausalLm> lm);

namespace models_internal {
std::shared_ptr<CausalLm> MakeLlama(const CausalLmConfig& config);
std::shared_ptr<CausalLm> MakeGpt2(const CausalLmConfig& config);
}  // namespace models_internal

}  // namespace kd

#endif  // LIBKD_DISTILL_MODELS_CAUSAL_LM_H_
