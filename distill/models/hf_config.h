// Hugging Face's config.json of a causal LM (transformers' LlamaConfig, Qwen2Config,
// GPT2Config), read into a CausalLmConfig and written back so that transformers'
// AutoModelForCausalLM.from_pretrained builds the same model.
#ifndef LIBKD_DISTILL_MODELS_HF_CONFIG_H_
#define LIBKD_DISTILL_MODELS_HF_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "distill/models/causal_lm.h"

namespace kd {

// The config in `text`, checked (CheckCausalLmConfig). InvalidArgument naming the field for a
// value of the wrong type, an architecture libkd lacks (naming the ones it has) or a setting
// libkd's models do not build (a rope_type other than default, Qwen2's sliding window).
absl::StatusOr<CausalLmConfig> ParseHfConfig(const std::string& text);

// config.json's text for `config` (architectures, model_type and the fields above).
std::string HfConfigJson(const CausalLmConfig& config);

}  // namespace kd

#endif  // LIBKD_DISTILL_MODELS_HF_CONFIG_H_
