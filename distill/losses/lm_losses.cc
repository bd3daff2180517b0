// "CausalLMLoss": transformers' ForCausalLMLoss, the loss a causal LM trains on alone (and the
// hard-label term beside a distillation loss): the mean cross-entropy of the logits at position
// t, "input" (B, T, V), against the label at t + 1, "labels" (B, T), over the positions whose
// next label is not ignore_index (-100: padding, or a prompt that takes no loss), in float32.
// Labels are the input ids themselves (Hugging Face's convention: the loss shifts them), as
// distill/data's token datasets give them.
#include <cstdint>
#include <memory>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "base/ivalue_util.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "distill/losses/loss.h"
#include "distill/models/next_token.h"

namespace kd {
namespace {

absl::StatusOr<std::unique_ptr<Loss>> MakeCausalLmLoss(const Kwargs& kwargs) {
  const int64_t ignore = IntKwarg(kwargs, "ignore_index");
  return MakeFunctionLoss([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(at::Tensor logits, in.Get("CausalLMLoss", "input"));
    KD_ASSIGN_OR_RETURN(at::Tensor labels, in.Get("CausalLMLoss", "labels"));
    if (logits.dim() != 3 || labels.dim() != 2 || logits.size(0) != labels.size(0) ||
        logits.size(1) != labels.size(1) || at::isFloatingType(labels.scalar_type())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "loss \"CausalLMLoss\": needs logits (B, T, V) and integer labels (B, T), got ",
          ShapeString(logits), " and ", ShapeString(labels)));
    }
    return NextTokenLoss(logits, labels, ignore);
  });
}

KD_REGISTER(LossRegistry(), "CausalLMLoss", MakeCausalLmLoss,
            {{.name = "ignore_index",
              .type = KwargType::kInteger,
              .doc = "a label that takes no part (padding, prompts)",
              .default_value = -100}});

}  // namespace
}  // namespace kd
