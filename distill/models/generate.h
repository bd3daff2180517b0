// Text generation from a causal LM (transformers' model.generate): greedy, or sampling with a
// temperature, top-k and top-p from a seeded generator; a batch of prompts left-padded with an
// attention mask; the KV cache; stop at EOS or max_new_tokens.
//
//   KD_ASSIGN_OR_RETURN(at::Tensor ids,
//                       kd::Generate(*lm, prompt, mask, {.max_new_tokens = 32, .eos_token_id = 2}));
//   // ids: [B, P + n], the prompts followed by what was generated, as transformers returns it
#ifndef LIBKD_DISTILL_MODELS_GENERATE_H_
#define LIBKD_DISTILL_MODELS_GENERATE_H_

#include <cstdint>
#include <optional>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "distill/models/causal_lm.h"

namespace kd {

// transformers' GenerationConfig fields of the same names (its defaults but top_k's: a
// transformers user's sampling keeps 50 of the tokens unless told otherwise; 0 here is off, as
// there).
struct GenerateOptions {
  int64_t max_new_tokens = 20;
  bool do_sample = false;       // false: greedy (the most likely token)
  double temperature = 1.0;     // > 0; sampling only
  int64_t top_k = 50;           // keep the k most likely tokens; 0: all
  double top_p = 1.0;           // keep the smallest set of tokens whose probability is >= p
  std::optional<int64_t> eos_token_id;  // a row stops after it; then gets pad_token_id
  int64_t pad_token_id = 0;
  uint64_t seed = 0;            // the sampling generator's
  bool use_cache = true;        // false: every step runs over the whole sequence (for checks)
};

// Generates up to `max_new_tokens` tokens after `prompt` (int64 [B, P]; left-padded, with
// `attention_mask` [B, P], 1 for tokens; undefined: no padding), in eval mode without
// gradients (the model's mode is restored). Returns [B, P + n], n <= max_new_tokens (fewer
// when every row reached EOS). Errors: InvalidArgument for ids outside the vocabulary, a
// prompt longer than the model's positions allow (GPT-2), options out of range.
absl::StatusOr<at::Tensor> Generate(CausalLm& lm, const at::Tensor& prompt,
                                    const at::Tensor& attention_mask,
                                    const GenerateOptions& options);

}  // namespace kd

#endif  // LIBKD_DISTILL_MODELS_GENERATE_H_
