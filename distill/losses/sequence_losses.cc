// Logit divergences for sequence models, as LLM distillation toolkits use them (GKD, Agarwal et
// al. 2024; DistiLLM, Ko et al. 2024). Each reads "student" and "teacher" logits (..., V) and
// optional "labels" (...), computes a divergence per token over the vocabulary (last
// dimension) and reduces it over the tokens whose label is not ignore_index:
//
//   forward_kl       KL(p_t || p_s)
//   reverse_kl       KL(p_s || p_t)
//   generalized_jsd  beta KL(p_t || m) + (1 - beta) KL(p_s || m),  m = beta p_t + (1 - beta) p_s
//   total_variation  1/2 sum_v |p_t - p_s|  (in [0, 1])
//   skew_forward_kl  KL(p_t || alpha p_t + (1 - alpha) p_s)
//   skew_reverse_kl  KL(p_s || alpha p_s + (1 - alpha) p_t)
//
// with p = softmax(logits / temperature) in float32 (float64 stays float64). Reductions:
// token_mean (default: the mean over kept tokens), sequence_mean (each sequence's mean over its
// kept tokens, then the mean over sequences with any), sum, none (per token, 0 where ignored).
// With no kept token the means are 0, not NaN: a fully masked batch gives no gradient.
// These are true divergences (0 for equal distributions); DistiLLM's code drops the teacher's
// entropy from its forward KLs, which changes the value by a constant and not the gradients.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "base/ivalue_util.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "distill/losses/loss.h"

namespace kd {
namespace {

enum class Divergence {
  kForwardKl,
  kReverseKl,
  kGeneralizedJsd,
  kTotalVariation,
  kSkewForwardKl,
  kSkewReverseKl
};

enum class Reduce { kTokenMean, kSequenceMean, kSum, kNone };

struct SequenceOptions {
  Divergence divergence;
  double temperature = 1;
  int64_t ignore_index = -100;
  Reduce reduce = Reduce::kTokenMean;
  double mix = 0.5;  // generalized_jsd's beta, the skews' alpha
};

// sum_v p (log p - log q), p = exp(log_p).
at::Tensor Kl(const at::Tensor& log_p, const at::Tensor& log_q) {
  return (log_p.exp() * (log_p - log_q)).sum(-1);
}

// log(a exp(x) + (1 - a) exp(y)) without leaving log space.
at::Tensor LogMix(const at::Tensor& log_x, const at::Tensor& log_y, double a) {
  return at::logaddexp(log_x + std::log(a), log_y + std::log1p(-a));
}

at::Tensor PerToken(const SequenceOptions& o, const at::Tensor& student,
                    const at::Tensor& teacher) {
  auto log_probs = [&](const at::Tensor& logits) {
    const at::Tensor x = logits.scalar_type() == at::kDouble ? logits : logits.to(at::kFloat);
    return at::log_softmax(o.temperature == 1 ? x : x / o.temperature, -1);
  };
  const at::Tensor ls = log_probs(student), lt = log_probs(teacher);
  switch (o.divergence) {
    case Divergence::kForwardKl:
      return Kl(lt, ls);
    case Divergence::kReverseKl:
      return Kl(ls, lt);
    case Divergence::kGeneralizedJsd: {
      const at::Tensor lm = LogMix(lt, ls, o.mix);
      return o.mix * Kl(lt, lm) + (1 - o.mix) * Kl(ls, lm);
    }
    case Divergence::kTotalVariation:
      return 0.5 * (lt.exp() - ls.exp()).abs().sum(-1);
    case Divergence::kSkewForwardKl:
      return o.mix == 0 ? Kl(lt, ls) : Kl(lt, LogMix(lt, ls, o.mix));
    case Divergence::kSkewReverseKl:
      return o.mix == 0 ? Kl(ls, lt) : Kl(ls, LogMix(ls, lt, o.mix));
  }
  return {};
}

class SequenceDivergence final : public Loss {
 public:
  SequenceDivergence(std::string key, SequenceOptions options)
      : key_(std::move(key)), o_(options) {}

  absl::StatusOr<at::Tensor> Forward(const LossInputs& inputs) override {
    KD_ASSIGN_OR_RETURN(at::Tensor student, inputs.Get(key_, "student"));
    KD_ASSIGN_OR_RETURN(at::Tensor teacher, inputs.Get(key_, "teacher"));
    const at::Tensor labels = inputs.GetOptional("labels");
    const int64_t min_dim = o_.reduce == Reduce::kSequenceMean ? 3 : 1;
    if (!student.sizes().equals(teacher.sizes()) || student.dim() < min_dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "loss \"", key_, "\": needs student and teacher logits of one shape (",
          o_.reduce == Reduce::kSequenceMean ? "batch, tokens, vocabulary" : "..., vocabulary",
          "), got student ", ShapeString(student), " and teacher ", ShapeString(teacher)));
    }
    if (labels.defined() && (at::isFloatingType(labels.scalar_type()) ||
                             !labels.sizes().equals(student.sizes().slice(0, student.dim() - 1)))) {
      return absl::InvalidArgumentError(
          absl::StrCat("loss \"", key_,
                       "\": labels must be integers shaped like the logits without their "
                       "vocabulary dimension, ",
                       ShapeString(student.select(-1, 0)), "; got ", ShapeString(labels), " of ",
                       c10::toString(labels.scalar_type())));
    }
    const at::Tensor per_token = PerToken(o_, student, teacher);
    if (!labels.defined()) return Reduced(per_token, at::ones_like(per_token));
    const at::Tensor keep = labels.ne(o_.ignore_index).to(labels.device());
    return Reduced(per_token.masked_fill(keep.logical_not(), 0), keep.to(per_token.scalar_type()));
  }

 private:
  // `values` are 0 where `keep` is.
  at::Tensor Reduced(const at::Tensor& values, const at::Tensor& keep) const {
    switch (o_.reduce) {
      case Reduce::kNone:
        return values;
      case Reduce::kSum:
        return values.sum();
      case Reduce::kTokenMean:
        return values.sum() / keep.sum().clamp_min(1);
      case Reduce::kSequenceMean: {
        const at::Tensor per_seq = values.flatten(1).sum(1), count = keep.flatten(1).sum(1);
        const at::Tensor has = count > 0;
        const at::Tensor means = per_seq / count.clamp_min(1);
        return (means * has).sum() / has.sum().clamp_min(1);
      }
    }
    return values;
  }

  std::string key_;
  SequenceOptions o_;
};

LossFactory Factory(std::string key, Divergence divergence, const char* mix_kwarg = nullptr) {
  return [=](const Kwargs& kwargs) -> absl::StatusOr<std::unique_ptr<Loss>> {
    SequenceOptions o{.divergence = divergence};
    o.temperature = NumberKwarg(kwargs, "temperature");
    o.ignore_index = IntKwarg(kwargs, "ignore_index");
    const std::string reduction = StringKwarg(kwargs, "reduction");
    o.reduce = reduction == "sequence_mean" ? Reduce::kSequenceMean
               : reduction == "sum"         ? Reduce::kSum
               : reduction == "none"        ? Reduce::kNone
                                            : Reduce::kTokenMean;
    if (mix_kwarg != nullptr) o.mix = NumberKwarg(kwargs, mix_kwarg);
    return std::unique_ptr<Loss>(std::make_unique<SequenceDivergence>(key, o));
  };
}

std::vector<KwargSpec> Specs(std::vector<KwargSpec> extra = {}) {
  std::vector<KwargSpec> specs = {PositiveNumberSpec("temperature", "softmax temperature", 1.0),
                                  {.name = "ignore_index",
                                   .type = KwargType::kInteger,
                                   .doc = "label of positions left out",
                                   .default_value = -100},
                                  {.name = "reduction",
                                   .type = KwargType::kString,
                                   .doc = "token_mean, sequence_mean, sum or none",
                                   .default_value = "token_mean",
                                   .choices = {"token_mean", "sequence_mean", "sum", "none"}}};
  specs.insert(specs.end(), extra.begin(), extra.end());
  return specs;
}

KD_REGISTER(LossRegistry(), "forward_kl", Factory("forward_kl", Divergence::kForwardKl), Specs());
KD_REGISTER(LossRegistry(), "reverse_kl", Factory("reverse_kl", Divergence::kReverseKl), Specs());
KD_REGISTER(LossRegistry(), "generalized_jsd",
            Factory("generalized_jsd", Divergence::kGeneralizedJsd, "beta"),
            Specs({JsdBetaKwargSpec()}));
KD_REGISTER(LossRegistry(), "total_variation",
            Factory("total_variation", Divergence::kTotalVariation), Specs());
const KwargSpec kSkew = {.name = "alpha",
                         .type = KwargType::kNumber,
                         .doc =
                             "skew: the weight of the first distribution in the mixture, in "
                             "[0, 1) (0: plain KL); DistiLLM's default",
                         .default_value = 0.1,
                         .min = 0,
                         .max = 1,
                         .max_exclusive = true};
KD_REGISTER(LossRegistry(), "skew_forward_kl",
            Factory("skew_forward_kl", Divergence::kSkewForwardKl, "alpha"), Specs({kSkew}));
KD_REGISTER(LossRegistry(), "skew_reverse_kl",
            Factory("skew_reverse_kl", Divergence::kSkewReverseKl, "alpha"), Specs({kSkew}));

}  // namespace
}  // namespace kd
