// Checking a causal LM's config and building it (the registry's keys: causal_lm_models.cc).
#include "distill/models/causal_lm.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "hooks/native_model.h"

namespace kd {

absl::StatusOr<CausalLmConfig> CheckCausalLmConfig(CausalLmConfig c) {
  const bool gpt2 = c.architecture == "gpt2";
  if (c.architecture != "llama" && c.architecture != "qwen2" && !gpt2) {
    return absl::InvalidArgumentError(
        absl::StrCat("architecture \"", c.architecture,
                     "\" is not one libkd has; it has: llama, qwen2 (and Llama-family models "
                     "with their config), gpt2"));
  }
  auto positive = [](const char* name, int64_t value) -> absl::Status {
    if (value > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(name, " must be > 0, got ", value));
  };
  KD_RETURN_IF_ERROR(positive("vocab_size", c.vocab_size));
  KD_RETURN_IF_ERROR(positive("hidden_size", c.hidden_size));
  KD_RETURN_IF_ERROR(positive("num_hidden_layers", c.num_hidden_layers));
  KD_RETURN_IF_ERROR(positive("num_attention_heads", c.num_attention_heads));
  KD_RETURN_IF_ERROR(positive("max_position_embeddings", c.max_position_embeddings));
  if (c.intermediate_size == 0 && gpt2) c.intermediate_size = 4 * c.hidden_size;
  KD_RETURN_IF_ERROR(positive("intermediate_size", c.intermediate_size));
  if (c.num_key_value_heads == 0) c.num_key_value_heads = c.num_attention_heads;
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_attention_heads (", c.num_attention_heads, ") must be a multiple of ",
                     "num_key_value_heads (", c.num_key_value_heads, ")"));
  }
  if (c.head_dim == 0) {
    if (c.hidden_size % c.num_attention_heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("hidden_size (", c.hidden_size, ") must be a multiple of ",
                       "num_attention_heads (", c.num_attention_heads, ") or head_dim given"));
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0 && !gpt2) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim must be even for rotary embeddings, got ", c.head_dim));
  }
  if (gpt2 && c.head_dim * c.num_attention_heads != c.hidden_size) {
    return absl::InvalidArgumentError("GPT-2's hidden_size must be num_attention_heads * head_dim");
  }
  const std::string want = gpt2 ? "gelu_new" : "silu";
  if (c.hidden_act != want && !(gpt2 && c.hidden_act == "gelu_pytorch_tanh")) {
    return absl::InvalidArgumentError(absl::StrCat("hidden_act \"", c.hidden_act, "\" for ",
                                                   c.architecture, ": libkd's has ", want));
  }
  if (c.norm_eps <= 0 || c.rope_theta <= 0 || c.dropout < 0 || c.dropout >= 1) {
    return absl::InvalidArgumentError("norm eps and rope_theta must be > 0 and dropout in [0, 1)");
  }
  return c;
}

absl::StatusOr<std::shared_ptr<CausalLm>> MakeCausalLm(const CausalLmConfig& config) {
  KD_ASSIGN_OR_RETURN(CausalLmConfig checked, CheckCausalLmConfig(config));
  return checked.architecture == "gpt2" ? models_internal::MakeGpt2(checked)
                                        : models_internal::MakeLlama(checked);
}

std::unique_ptr<Model> MakeCausalLmModel(std::shared_ptr<CausalLm> lm) {
  CausalLm* impl = lm.get();
  NativeForwardFn forward = [impl](std::vector<c10::IValue>& args, const Kwargs& kwargs) {
    TORCH_CHECK(!args.empty() && args.size() <= 2 && args[0].isTensor(),
                "a causal LM takes input_ids and, optionally, attention_mask");
    LmInputs in{.input_ids = args[0].toTensor()};
    if (args.size() == 2 && args[1].isTensor()) in.attention_mask = args[1].toTensor();
    if (const c10::IValue* mask = FindKwarg(kwargs, "attention_mask");
        mask != nullptr && mask->isTensor()) {
      in.attention_mask = mask->toTensor();
    }
    TORCH_CHECK(in.input_ids.scalar_type() == at::kLong && in.input_ids.dim() == 2,
                "input_ids must be int64 [batch, tokens], got ", in.input_ids.sizes());
    return c10::IValue(impl->Logits(in));
  };
  return MakeNativeModel(std::move(lm), std::move(forward));
}

}  // namespace kd
