// "on_policy_generation": GKD's on-policy distillation (Agarwal et al. 2024) as TRL's
// GKDTrainer runs it, a pre-forward process of a stage over causal LMs:
//
//   pre_forward_proc { key: "on_policy_generation"
//                      kwargs { name: "lmbda" number: 0.5 }
//                      kwargs { name: "max_new_tokens" integer: 32 } }
//
// With probability `lmbda` a batch's windows are cut to their first `prompt_tokens` tokens and
// continued by the student, sampled (temperature, top_k, top_p) through kd::Generate with its
// KV cache, in eval mode and without gradients; the batch's input ids become prompt +
// continuation and its labels the same ids with -100 on the prompt, so the losses (the
// generalized JSD on shifted labels, the next-token loss) score the student's own tokens
// against the teacher's distribution on them. With `seq_kd` (TRL's), a batch that stays
// off-policy is continued by the teacher instead (sequence-level KD); otherwise the dataset's
// batch is used as it is.
//
// Draws are seeded from `seed` and the stage's count of trained batches (which checkpoints
// keep), never from a global generator: a run repeats, and a resumed run draws what the
// uninterrupted one drew. A generated batch loses its "indices" (it is no longer those
// windows), so the teacher cache runs the teacher on it and keeps serving the others exactly.
// A batch whose attention_mask has padding inside the prompt stays off-policy (kd::Generate
// takes left-padded prompts; a token window is right-padded only at a document's end).
#include <cstdint>
#include <memory>
#include <string>

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "distill/data/batch.h"
#include "distill/models/causal_lm.h"
#include "distill/models/generate.h"
#include "distill/procs/proc_func.h"
#include "distill/procs/training_context.h"
#include "hooks/native_model.h"

namespace kd {
namespace {

constexpr char kKey[] = "on_policy_generation";

// SplitMix64: a well-mixed 64-bit value of a counter (Steele et al. 2014).
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A uniform double in [0, 1) from 53 bits of `bits`.
double Uniform(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

absl::StatusOr<std::shared_ptr<CausalLm>> GeneratingLm(TrainingContext& box, ModelRole role) {
  const Model* model = box.model(role);
  const char* name = role == ModelRole::kStudent ? "student" : "teacher";
  if (model == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(kKey, ": seq_kd needs a teacher, and this box has none"));
  }
  std::shared_ptr<CausalLm> lm = std::dynamic_pointer_cast<CausalLm>(GetNativeModule(*model));
  if (lm == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        kKey, ": the ", name, " is not one of libkd's native causal LMs (\"llama\", \"qwen2\", ",
        "\"gpt2\", \"hf_causal_lm\"), which generate with a KV cache; a ", model->kind(),
        " model cannot: give the ", name, " as a native causal LM"));
  }
  return lm;
}

absl::Status OnPolicyGeneration(TrainingContext& box, Batch& batch, const Kwargs& kwargs) {
  const double lmbda = NumberKwarg(kwargs, "lmbda");
  const bool seq_kd = BoolKwarg(kwargs, "seq_kd");
  if (!batch.samples.isTensor() || batch.samples.toTensor().dim() != 2 ||
      batch.samples.toTensor().scalar_type() != at::kLong) {
    return absl::InvalidArgumentError(absl::StrCat(
        kKey, ": needs a batch of token windows (input_ids int64 [batch, tokens], a token ",
        "dataset's), got ", batch.samples.tagKind()));
  }
  const at::Tensor ids = batch.samples.toTensor();
  const int64_t window = ids.size(1);
  const int64_t new_tokens = IntKwarg(kwargs, "max_new_tokens");
  const int64_t prompt_tokens = IntKwarg(kwargs, "prompt_tokens") > 0
                                    ? IntKwarg(kwargs, "prompt_tokens")
                                    : window - new_tokens;
  if (prompt_tokens < 1 || prompt_tokens > window) {
    return absl::InvalidArgumentError(absl::StrCat(
        kKey, ": a prompt of ", prompt_tokens, " tokens from windows of ", window,
        " (prompt_tokens, or the window less max_new_tokens ", new_tokens,
        "): give max_new_tokens below the window, or prompt_tokens between 1 and ", window));
  }
  // This batch's draws: the coin, then the sampler's seed.
  const uint64_t base = Mix(static_cast<uint64_t>(IntKwarg(kwargs, "seed")) ^
                            Mix(static_cast<uint64_t>(box.stage_grad_count())));
  const bool on_policy = Uniform(Mix(base)) < lmbda;
  if (!on_policy && !seq_kd) return absl::OkStatus();

  c10::Dict<std::string, at::Tensor> supp;
  if (batch.supp.isGenericDict()) {
    for (const auto& entry : batch.supp.toGenericDict()) {
      supp.insert(entry.key().toStringRef(), entry.value().toTensor());
    }
  }
  if (auto mask = supp.find("attention_mask");
      mask != supp.end() && !mask->value().narrow(1, 0, prompt_tokens).ne(0).all().item<bool>()) {
    return absl::OkStatus();  // padding in a prompt: this batch stays as it is
  }
  KD_ASSIGN_OR_RETURN(std::shared_ptr<CausalLm> lm,
                      GeneratingLm(box, on_policy ? ModelRole::kStudent : ModelRole::kTeacher));
  const GenerateOptions options{.max_new_tokens = new_tokens,
                                .do_sample = true,
                                .temperature = NumberKwarg(kwargs, "temperature"),
                                .top_k = IntKwarg(kwargs, "top_k"),
                                .top_p = NumberKwarg(kwargs, "top_p"),
                                .seed = Mix(base + 1)};
  KD_ASSIGN_OR_RETURN(
      at::Tensor generated,
      Generate(*lm, ids.narrow(1, 0, prompt_tokens).contiguous(), at::Tensor(), options));
  at::Tensor labels = generated.clone();
  labels.narrow(1, 0, prompt_tokens).fill_(-100);
  batch.samples = generated;
  batch.targets = labels;
  // No longer the dataset's windows: no index for the teacher cache to key on.
  (void)supp.erase("indices");
  if (supp.contains("attention_mask"))
    supp.insert_or_assign("attention_mask", at::ones_like(generated));
  batch.supp = supp.empty() ? c10::IValue() : c10::IValue(supp);
  return absl::OkStatus();
}

KD_REGISTER_PROC_FUNC(
    PreForwardProc, kKey, OnPolicyGeneration,
    {{.name = "lmbda",
      .type = KwargType::kNumber,
      .doc = "probability of a batch on-policy (TRL's lmbda): 0 off-policy, 1 always",
      .default_value = 0.5,
      .min = 0,
      .max = 1},
     {.name = "max_new_tokens",
      .type = KwargType::kInteger,
      .doc = "tokens the student generates after the prompt (TRL's default 128)",
      .default_value = 128,
      .min = 1},
     {.name = "prompt_tokens",
      .type = KwargType::kInteger,
      .doc = "tokens of each window kept as the prompt; 0: the window less max_new_tokens",
      .default_value = 0,
      .min = 0},
     PositiveNumberSpec("temperature", "sampling temperature (TRL's default 0.9)", 0.9),
     {.name = "top_k",
      .type = KwargType::kInteger,
      .doc = "sample among the k most likely tokens; 0: all (TRL's default)",
      .default_value = 0,
      .min = 0},
     {.name = "top_p",
      .type = KwargType::kNumber,
      .doc = "nucleus sampling's p; 1: off",
      .default_value = 1.0,
      .min = 0,
      .max = 1,
      .min_exclusive = true},
     {.name = "seq_kd",
      .type = KwargType::kBool,
      .doc = "TRL's seq_kd: an off-policy batch is continued by the teacher instead",
      .default_value = false},
     {.name = "seed",
      .type = KwargType::kInteger,
      .doc = "seed of the coin and the sampler, mixed with the stage's batch count",
      .default_value = 0}});

}  // namespace
}  // namespace kd
