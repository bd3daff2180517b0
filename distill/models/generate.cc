#include "distill/models/generate.h"

#include <cmath>
#include <optional>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/torch_status.h"

namespace kd {
namespace {

// transformers' warpers in its order: temperature, top-k, top-p (each on float32 logits [B, V]).
at::Tensor Warp(at::Tensor logits, const GenerateOptions& o) {
  if (o.temperature != 1.0) logits = logits / o.temperature;
  const int64_t vocab = logits.size(-1);
  if (o.top_k > 0 && o.top_k < vocab) {
    const at::Tensor kth = std::get<0>(logits.topk(o.top_k, -1)).narrow(-1, o.top_k - 1, 1);
    logits = logits.masked_fill(logits < kth, -INFINITY);
  }
  if (o.top_p < 1.0) {
    // Sorted ascending, the tokens whose cumulative probability stays <= 1 - top_p go (the
    // most likely one always stays), as TopPLogitsWarper.
    auto [sorted, order] = logits.sort(/*dim=*/-1, /*descending=*/false);
    at::Tensor remove = sorted.softmax(-1).cumsum(-1) <= (1.0 - o.top_p);
    remove.select(-1, vocab - 1).fill_(false);
    logits = logits.masked_fill(remove.scatter(-1, order, remove), -INFINITY);
  }
  return logits;
}

absl::Status Check(const CausalLm& lm, const at::Tensor& prompt, const at::Tensor& mask,
                   const GenerateOptions& o) {
  const CausalLmConfig& c = lm.config();
  if (!prompt.defined() || prompt.dim() != 2 || prompt.scalar_type() != at::kLong ||
      prompt.size(1) == 0) {
    return absl::InvalidArgumentError("the prompt must be int64 [batch, tokens] with a token");
  }
  if (mask.defined() && mask.sizes() != prompt.sizes()) {
    return absl::InvalidArgumentError("attention_mask must have the prompt's shape");
  }
  const int64_t lo = prompt.min().item<int64_t>(), hi = prompt.max().item<int64_t>();
  if (lo < 0 || hi >= c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("prompt token id ", lo < 0 ? lo : hi,
                                                   " is outside the vocabulary [0, ",
                                                   c.vocab_size, ")"));
  }
  if (o.max_new_tokens < 0 || o.temperature <= 0 || o.top_k < 0 || o.top_p <= 0 ||
      o.top_p > 1) {
    return absl::InvalidArgumentError(
        "max_new_tokens >= 0, temperature > 0, top_k >= 0 and top_p in (0, 1] are required");
  }
  if (c.architecture == "gpt2" && prompt.size(1) + o.max_new_tokens > c.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", prompt.size(1), ") + max_new_tokens (", o.max_new_tokens,
        ") exceeds the model's ", c.max_position_embeddings, " positions"));
  }
  return absl::OkStatus();
}

at::Tensor Run(CausalLm& lm, const at::Tensor& ids, at::Tensor mask, const GenerateOptions& o) {
  at::Tensor out = ids;
  // transformers' positions under left padding: the count of tokens before, padding at 1.
  auto positions = [](const at::Tensor& m) { return (m.cumsum(-1) - 1).masked_fill(m == 0, 1); };
  std::optional<at::Generator> gen;
  if (o.do_sample) {
    gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  }
  at::Tensor unfinished = at::ones({ids.size(0)}, ids.options().dtype(at::kBool));
  KvCache cache;
  at::Tensor step_ids = ids;
  for (int64_t n = 0; n < o.max_new_tokens; ++n) {
    at::Tensor pos = positions(mask);
    LmInputs in{.input_ids = o.use_cache ? step_ids : out, .attention_mask = mask};
    if (o.use_cache) {
      in.position_ids = pos.narrow(1, pos.size(1) - step_ids.size(1), step_ids.size(1));
      in.cache = &cache;
    } else {
      in.position_ids = pos;
    }
    const at::Tensor logits = lm.Logits(in).select(1, -1).to(at::kFloat);
    at::Tensor next;
    if (o.do_sample) {
      next = at::multinomial(Warp(logits, o).softmax(-1).cpu(), 1, false, gen).squeeze(1)
                 .to(logits.device());
    } else {
      next = logits.argmax(-1);
    }
    next = at::where(unfinished, next, at::full_like(next, o.pad_token_id));
    out = at::cat({out, next.unsqueeze(1)}, 1);
    mask = at::cat({mask, at::ones({mask.size(0), 1}, mask.options())}, 1);
    if (o.eos_token_id.has_value()) {
      unfinished = unfinished.logical_and(next != *o.eos_token_id);
      if (!unfinished.any().item<bool>()) break;
    }
    step_ids = next.unsqueeze(1);
  }
  return out;
}

}  // namespace

absl::StatusOr<at::Tensor> Generate(CausalLm& lm, const at::Tensor& prompt,
                                    const at::Tensor& attention_mask,
                                    const GenerateOptions& options) {
  KD_RETURN_IF_ERROR(Check(lm, prompt, attention_mask, options));
  at::NoGradGuard no_grad;
  const bool training = lm.is_training();
  lm.eval();
  const at::Tensor mask = attention_mask.defined() ? attention_mask.to(at::kLong)
                                                   : at::ones_like(prompt);
  absl::StatusOr<at::Tensor> out =
      CallTorch([&] { return Run(lm, prompt, mask, options); }, absl::StatusCode::kInternal);
  lm.train(training);
  return out;
}

}  // namespace kd
