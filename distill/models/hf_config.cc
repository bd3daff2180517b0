// Hugging Face's config.json of a causal LM, read into CausalLmConfig and written back.
#include "distill/models/hf_config.h"

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace kd {
namespace {

using Json = nlohmann::json;

// json[key] as T if present and not null; `fallback` otherwise; an error naming the key for a
// value of another type.
template <typename T>
absl::StatusOr<T> Field(const Json& json, const char* key, T fallback) {
  const auto it = json.find(key);
  if (it == json.end() || it->is_null()) return fallback;
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return absl::InvalidArgumentError(absl::StrCat(key, " must be a bool"));
  } else if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat(key, " must be an integer, got ", it->dump()));
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!it->is_number()) {
      return absl::InvalidArgumentError(absl::StrCat(key, " must be a number, got ", it->dump()));
    }
  } else {
    if (!it->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(key, " must be a string, got ", it->dump()));
    }
  }
  return it->get<T>();
}

absl::StatusOr<std::optional<int64_t>> TokenId(const Json& json, const char* key) {
  const auto it = json.find(key);
  if (it == json.end() || it->is_null()) return std::optional<int64_t>();
  // transformers allows a list of EOS ids; the first is the one generation stops at first.
  const Json& value = it->is_array() && !it->empty() ? it->front() : *it;
  if (!value.is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(key, " must be an integer"));
  }
  return std::optional<int64_t>(value.get<int64_t>());
}

absl::Status ReadLlama(const Json& j, CausalLmConfig& c) {
  KD_ASSIGN_OR_RETURN(c.hidden_size, Field<int64_t>(j, "hidden_size", 0));
  KD_ASSIGN_OR_RETURN(c.intermediate_size, Field<int64_t>(j, "intermediate_size", 0));
  KD_ASSIGN_OR_RETURN(c.num_hidden_layers, Field<int64_t>(j, "num_hidden_layers", 0));
  KD_ASSIGN_OR_RETURN(c.num_attention_heads, Field<int64_t>(j, "num_attention_heads", 0));
  KD_ASSIGN_OR_RETURN(c.num_key_value_heads, Field<int64_t>(j, "num_key_value_heads", 0));
  KD_ASSIGN_OR_RETURN(c.head_dim, Field<int64_t>(j, "head_dim", 0));
  KD_ASSIGN_OR_RETURN(c.max_position_embeddings,
                      Field<int64_t>(j, "max_position_embeddings", 2048));
  KD_ASSIGN_OR_RETURN(c.norm_eps, Field<double>(j, "rms_norm_eps", 1e-6));
  KD_ASSIGN_OR_RETURN(c.attention_bias, Field<bool>(j, "attention_bias", false));
  KD_ASSIGN_OR_RETURN(c.mlp_bias, Field<bool>(j, "mlp_bias", false));
  KD_ASSIGN_OR_RETURN(c.hidden_act, Field<std::string>(j, "hidden_act", "silu"));
  KD_ASSIGN_OR_RETURN(c.dropout, Field<double>(j, "attention_dropout", 0.0));
  // transformers 5 writes rope_parameters {rope_type, rope_theta}; 4.x wrote rope_theta and
  // rope_scaling.
  KD_ASSIGN_OR_RETURN(c.rope_theta, Field<double>(j, "rope_theta", 10000.0));
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_object()) return absl::InvalidArgumentError(absl::StrCat(key, " must be an object"));
    KD_ASSIGN_OR_RETURN(std::string type, Field<std::string>(*it, "rope_type", "default"));
    if (type != "default") {
      return absl::InvalidArgumentError(absl::StrCat(
          key, ".rope_type \"", type, "\" is not built in libkd (it has: default)"));
    }
    KD_ASSIGN_OR_RETURN(c.rope_theta, Field<double>(*it, "rope_theta", c.rope_theta));
  }
  if (c.architecture == "qwen2") {
    KD_ASSIGN_OR_RETURN(bool sliding, Field<bool>(j, "use_sliding_window", false));
    if (sliding) {
      return absl::InvalidArgumentError(
          "use_sliding_window true is not built in libkd (Qwen2's default false is)");
    }
  }
  return absl::OkStatus();
}

absl::Status ReadGpt2(const Json& j, CausalLmConfig& c) {
  KD_ASSIGN_OR_RETURN(c.hidden_size, Field<int64_t>(j, "n_embd", 768));
  KD_ASSIGN_OR_RETURN(c.intermediate_size, Field<int64_t>(j, "n_inner", 0));
  KD_ASSIGN_OR_RETURN(c.num_hidden_layers, Field<int64_t>(j, "n_layer", 12));
  KD_ASSIGN_OR_RETURN(c.num_attention_heads, Field<int64_t>(j, "n_head", 12));
  KD_ASSIGN_OR_RETURN(c.max_position_embeddings, Field<int64_t>(j, "n_positions", 1024));
  KD_ASSIGN_OR_RETURN(c.norm_eps, Field<double>(j, "layer_norm_epsilon", 1e-5));
  KD_ASSIGN_OR_RETURN(c.hidden_act, Field<std::string>(j, "activation_function", "gelu_new"));
  KD_ASSIGN_OR_RETURN(c.dropout, Field<double>(j, "resid_pdrop", 0.1));
  for (const char* key : {"embd_pdrop", "attn_pdrop"}) {
    KD_ASSIGN_OR_RETURN(double p, Field<double>(j, key, 0.1));
    if (p != c.dropout) {
      return absl::InvalidArgumentError(absl::StrCat(
          key, " (", p, ") differs from resid_pdrop (", c.dropout,
          "): libkd's GPT-2 has one dropout probability; give them the same value"));
    }
  }
  for (const char* key : {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"}) {
    KD_ASSIGN_OR_RETURN(bool on, Field<bool>(j, key, false));
    if (on) return absl::InvalidArgumentError(absl::StrCat(key, " true is not built in libkd"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CausalLmConfig> ParseHfConfig(const std::string& text) {
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("not a JSON object (config.json of a causal LM expected)");
  }
  CausalLmConfig c;
  KD_ASSIGN_OR_RETURN(c.architecture, Field<std::string>(j, "model_type", ""));
  if (c.architecture.empty()) {
    return absl::InvalidArgumentError("no model_type: libkd reads llama, qwen2 and gpt2");
  }
  KD_ASSIGN_OR_RETURN(c.vocab_size, Field<int64_t>(j, "vocab_size", 0));
  const bool gpt2 = c.architecture == "gpt2";
  KD_ASSIGN_OR_RETURN(c.tie_word_embeddings, Field<bool>(j, "tie_word_embeddings", gpt2));
  KD_ASSIGN_OR_RETURN(c.bos_token_id, TokenId(j, "bos_token_id"));
  KD_ASSIGN_OR_RETURN(c.eos_token_id, TokenId(j, "eos_token_id"));
  KD_ASSIGN_OR_RETURN(c.pad_token_id, TokenId(j, "pad_token_id"));
  if (gpt2) {
    KD_RETURN_IF_ERROR(ReadGpt2(j, c));
  } else if (c.architecture == "llama" || c.architecture == "qwen2") {
    KD_RETURN_IF_ERROR(ReadLlama(j, c));
  }
  return CheckCausalLmConfig(std::move(c));
}

std::string HfConfigJson(const CausalLmConfig& c) {
  Json j;
  auto id = [](const std::optional<int64_t>& v) { return v.has_value() ? Json(*v) : Json(); };
  j["bos_token_id"] = id(c.bos_token_id);
  j["eos_token_id"] = id(c.eos_token_id);
  j["pad_token_id"] = id(c.pad_token_id);
  j["model_type"] = c.architecture;
  j["vocab_size"] = c.vocab_size;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["dtype"] = "float32";
  if (c.architecture == "gpt2") {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["n_embd"] = c.hidden_size;
    j["n_inner"] = c.intermediate_size;
    j["n_layer"] = c.num_hidden_layers;
    j["n_head"] = c.num_attention_heads;
    j["n_positions"] = c.max_position_embeddings;
    j["layer_norm_epsilon"] = c.norm_eps;
    j["activation_function"] = c.hidden_act;
    j["resid_pdrop"] = j["embd_pdrop"] = j["attn_pdrop"] = c.dropout;
  } else {
    j["architectures"] = {c.architecture == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
    j["hidden_size"] = c.hidden_size;
    j["intermediate_size"] = c.intermediate_size;
    j["num_hidden_layers"] = c.num_hidden_layers;
    j["num_attention_heads"] = c.num_attention_heads;
    j["num_key_value_heads"] = c.num_key_value_heads;
    j["head_dim"] = c.head_dim;
    j["max_position_embeddings"] = c.max_position_embeddings;
    j["rms_norm_eps"] = c.norm_eps;
    j["hidden_act"] = c.hidden_act;
    j["attention_dropout"] = c.dropout;
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
    if (c.architecture == "llama") {
      j["attention_bias"] = c.attention_bias;
      j["mlp_bias"] = c.mlp_bias;
    }
  }
  return j.dump(2) + "\n";
}

}  // namespace kd
