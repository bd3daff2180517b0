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
//
// shift_labels (causal LMs' logits beside their input ids as labels): position t is kept where
// the label at t + 1 is (transformers' shift, distill/models/next_token.h), the last position
// never, as GKD and DistiLLM score a causal LM's predictions. chunk_size (forward_kl,
// reverse_kl, generalized_jsd with token_mean): the kept tokens computed that many at a time
// with no softmax kept for the backward (losses/internal/chunked_divergence.h, as
// silverspoon-kd's kl_div and jsd chunk), so a 32k-50k vocabulary at a long block fits memory:
// the same value up to float32 summation order.
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
#include "distill/losses/internal/chunked_divergence.h"
#include "distill/losses/loss.h"
#include "distill/models/next_token.h"

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
  bool shift_labels = false;
  int64_t chunk = 0;  // chunk_size
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
    at::Tensor labels = inputs.GetOptional("labels");
    if (o_.shift_labels && !labels.defined()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "loss \"", key_,
          "\": shift_labels needs \"labels\" (the input ids, -100 where no loss "
          "is taken); give the term an input of arg \"labels\", or set shift_labels false"));
    }
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
    if (o_.shift_labels) labels = NextTokenLabels(labels, o_.ignore_index);
    if (o_.chunk > 0) return ChunkedTokenMean(student, teacher, labels);
    const at::Tensor per_token = PerToken(o_, student, teacher);
    if (!labels.defined()) return Reduced(per_token, at::ones_like(per_token));
    const at::Tensor keep = labels.ne(o_.ignore_index).to(labels.device());
    return Reduced(per_token.masked_fill(keep.logical_not(), 0), keep.to(per_token.scalar_type()));
  }

 private:
  // The token mean over the kept tokens, chunk_size of them at a time. The chunked functions
  // give T^2 / N sum KL (silverspoon-kd's scaling); these divergences have no T^2.
  at::Tensor ChunkedTokenMean(const at::Tensor& student, const at::Tensor& teacher,
                              const at::Tensor& labels) const {
    const int64_t vocab = student.size(-1);
    at::Tensor s = student.reshape({-1, vocab}), t = teacher.reshape({-1, vocab});
    if (labels.defined()) {
      const at::Tensor kept = labels.reshape({-1}).ne(o_.ignore_index).nonzero().squeeze(1);
      if (kept.numel() == 0) return (s.sum() * 0).to(at::kFloat);  // no token: 0, no NaN
      if (kept.numel() < s.size(0)) {
        s = s.index_select(0, kept.to(s.device()));
        t = t.index_select(0, kept.to(t.device()));
      }
    }
    const double temp = o_.temperature;
    at::Tensor sum_t2;
    switch (o_.divergence) {
      case Divergence::kForwardKl:
        sum_t2 = losses_internal::ChunkedKlDivergence(s, t, temp, o_.chunk);
        break;
      case Divergence::kReverseKl:  // KL(p_s || p_t): the forward KL with the roles swapped
        sum_t2 = losses_internal::ChunkedKlDivergence(t, s, temp, o_.chunk);
        break;
      default:  // kGeneralizedJsd (the factory refuses the others)
        sum_t2 = losses_internal::ChunkedJsd(s, t, temp, o_.mix, o_.chunk);
        break;
    }
    return temp == 1 ? sum_t2 : sum_t2 / (temp * temp);
  }

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
    o.shift_labels = BoolKwarg(kwargs, "shift_labels");
    if (kwargs.contains("chunk_size")) o.chunk = IntKwarg(kwargs, "chunk_size");
    if (o.chunk > 0 && o.reduce != Reduce::kTokenMean) {
      return absl::InvalidArgumentError(
          absl::StrCat("loss \"", key, "\": chunk_size ", o.chunk,
                       " computes the token mean only, not reduction \"", reduction,
                       "\"; set reduction \"token_mean\", or chunk_size 0"));
    }
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
                                   .choices = {"token_mean", "sequence_mean", "sum", "none"}},
                                  {.name = "shift_labels",
                                   .type = KwargType::kBool,
                                   .doc = "causal LM: keep position t where label t + 1 is kept, "
                                          "never the last",
                                   .default_value = false}};
  specs.insert(specs.end(), extra.begin(), extra.end());
  return specs;
}

const KwargSpec kChunkSize = {.name = "chunk_size",
                              .type = KwargType::kInteger,
                              .doc =
                                  "kept tokens computed at a time, no softmax kept for the "
                                  "backward (less memory, same value); 0: all at once",
                              .default_value = 0,
                              .min = 0};
KD_REGISTER(LossRegistry(), "forward_kl", Factory("forward_kl", Divergence::kForwardKl),
            Specs({kChunkSize}));
KD_REGISTER(LossRegistry(), "reverse_kl", Factory("reverse_kl", Divergence::kReverseKl),
            Specs({kChunkSize}));
KD_REGISTER(LossRegistry(), "generalized_jsd",
            Factory("generalized_jsd", Divergence::kGeneralizedJsd, "beta"),
            Specs({JsdBetaKwargSpec(), kChunkSize}));
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
