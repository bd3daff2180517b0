// Text in and out of a causal LM through a SentencePiece tokenizer: what //tools:generate prints
// and the LM job (`//tools:distill -- --job=lm`) samples from each of its models.
//
//   KD_ASSIGN_OR_RETURN(std::vector<std::string> texts,
//                       kd::GenerateText(*lm, *tokenizer, {"The cat"}, {.max_new_tokens = 40}));
#ifndef LIBKD_TOOLS_LM_TEXT_H_
#define LIBKD_TOOLS_LM_TEXT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "distill/data/sentencepiece_tokenizer.h"
#include "distill/models/causal_lm.h"
#include "distill/models/generate.h"

namespace kd {

// Each prompt (bos first, as the tokenizer has one) continued by `lm`, the prompts one
// left-padded batch as transformers' generate wants it for a decoder-only model; the texts
// returned with their prompts, up to eos. `options.pad_token_id` and `eos_token_id` are the
// tokenizer's (its pad, else 0; its eos, if any). InvalidArgument for an empty prompt or a
// tokenizer larger than the model's vocabulary; Generate's errors.
absl::StatusOr<std::vector<std::string>> GenerateText(CausalLm& lm,
                                                      const SentencePieceTokenizer& tokenizer,
                                                      const std::vector<std::string>& prompts,
                                                      GenerateOptions options);

}  // namespace kd

#endif  // LIBKD_TOOLS_LM_TEXT_H_
