// Hugging Face model folders of causal LMs: config.json + model.safetensors (or its sharded
// index), read into libkd's native models (causal_lm.h) and written back, so that a student
// distilled in C++ opens with transformers' AutoModelForCausalLM.from_pretrained.
//
//   KD_ASSIGN_OR_RETURN(std::shared_ptr<kd::CausalLm> lm, kd::LoadHfCausalLm("models/llama"));
//   KD_RETURN_IF_ERROR(kd::SaveHfCausalLm(*lm, "runs/x/student_hf"));
//
// The registry's "hf_causal_lm" builds one from a config: `native { key: "hf_causal_lm" kwargs
// { name: "path" string: "models/llama" } }`.
#ifndef LIBKD_DISTILL_MODELS_HF_CAUSAL_LM_H_
#define LIBKD_DISTILL_MODELS_HF_CAUSAL_LM_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "distill/models/causal_lm.h"

namespace kd {

// The model of `folder`'s config.json with its weights (converted to float32). Errors name the
// folder and the problem: config.json missing or unreadable (ParseHfConfig's errors), a weight
// the model lacks or does not have (each named, with the nearest), a shape that differs, the
// safetensors reader's errors. A tied lm_head.weight in the file must equal the embedding's.
absl::StatusOr<std::shared_ptr<CausalLm>> LoadHfCausalLm(const std::string& folder,
                                                         bool gradient_checkpointing = false);

// Writes config.json and model.safetensors (float32; a tied lm_head saved once, under the
// embedding's name, as transformers does) into `folder`, made if missing (its parent must
// exist); the files are replaced atomically one by one.
absl::Status SaveHfCausalLm(CausalLm& lm, const std::string& folder);

}  // namespace kd

#endif  // LIBKD_DISTILL_MODELS_HF_CAUSAL_LM_H_
