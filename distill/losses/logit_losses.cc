// torchdistill's mid-level losses on the two models' logits (its torchdistill/losses/
// mid_level.py, 1.1.5), with its definitions, kwargs and defaults: DISTPlus and SRD (with
// features), SKD direction and instance. The module-path kwargs torchdistill names them by are
// the term's inputs here (their import rules below).
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/string_view.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "distill/losses/loss.h"
#include "distill/losses/torchdistill_rule.h"

namespace kd {
namespace {

// The inputs of a loss on logits ("student", "teacher") and features ("student_features",
// "teacher_features"), each pair of one shape.
struct LogitsAndFeatures {
  at::Tensor s, t, fs, ft;
};
absl::StatusOr<LogitsAndFeatures> ReadLogitsAndFeatures(absl::string_view key,
                                                        const LossInputs& in) {
  LogitsAndFeatures v;
  KD_ASSIGN_OR_RETURN(v.s, in.Get(key, "student"));
  KD_ASSIGN_OR_RETURN(v.t, in.Get(key, "teacher"));
  KD_ASSIGN_OR_RETURN(v.fs, in.Get(key, "student_features"));
  KD_ASSIGN_OR_RETURN(v.ft, in.Get(key, "teacher_features"));
  KD_RETURN_IF_ERROR(SameShape(key, v.s, v.t, "student", "teacher"));
  KD_RETURN_IF_ERROR(SameShape(key, v.fs, v.ft, "student_features", "teacher_features"));
  return v;
}

// 1 - mean Pearson correlation of the rows of `a` and `b` (DIST's inter-class relation).
at::Tensor InterRelation(const at::Tensor& a, const at::Tensor& b, double eps) {
  return 1 - at::cosine_similarity(a - a.mean(1, /*keepdim=*/true), b - b.mean(1, /*keepdim=*/true),
                                   1, eps)
                 .mean();
}

// DIST+ as torchdistill 1.1.5 computes it: DIST on the logits ("student", "teacher") plus iota
// times the channel relation of the features ("student_features", "teacher_features": their
// mean Pearson correlation across channels at each position, the correlation itself, not 1 -
// correlation) plus kappa times the spatial relation (DIST's inter-class relation of the
// channel-summed maps, positions as rows).
absl::StatusOr<std::unique_ptr<Loss>> MakeDistPlus(const Kwargs& kwargs) {
  const double beta = NumberKwarg(kwargs, "beta"), gamma = NumberKwarg(kwargs, "gamma");
  const double iota = NumberKwarg(kwargs, "iota"), kappa = NumberKwarg(kwargs, "kappa");
  const double tau = NumberKwarg(kwargs, "tau"), eps = NumberKwarg(kwargs, "eps");
  return MakeFunctionLoss([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(LogitsAndFeatures v, ReadLogitsAndFeatures("DISTPlusLoss", in));
    const at::Tensor &s = v.s, &t = v.t, &fs = v.fs, &ft = v.ft;
    const at::Tensor ys = (s / tau).softmax(1), yt = (t / tau).softmax(1);
    const at::Tensor dist = beta * tau * tau * InterRelation(ys, yt, eps) +
                            gamma * tau * tau * InterRelation(ys.t(), yt.t(), eps);
    const at::Tensor cs = fs - fs.mean(1, /*keepdim=*/true);
    const at::Tensor ct = ft - ft.mean(1, /*keepdim=*/true);
    const at::Tensor channel =
        ((cs * ct).sum(1) / ((cs.pow(2).sum(1) * ct.pow(2).sum(1)).sqrt() + eps)).mean();
    const at::Tensor spatial =
        InterRelation(fs.sum(1).flatten(1).t(), ft.sum(1).flatten(1).t(), eps);
    return dist + iota * channel + kappa * spatial;
  });
}

// KL of log_softmax(s / T) from softmax(t / T) with torch.nn.KLDivLoss's reduction.
at::Tensor SoftKl(const at::Tensor& s, const at::Tensor& t, double temperature,
                  const std::string& reduction) {
  // T = 1 (SRD's default) skips the divisions.
  const at::Tensor log_p = at::log_softmax(temperature == 1 ? s : s / temperature, 1);
  const at::Tensor q = at::softmax(temperature == 1 ? t : t / temperature, 1);
  if (reduction == "batchmean") return at::kl_div(log_p, q, at::Reduction::Sum) / s.size(0);
  return at::kl_div(log_p, q, ReductionEnum(reduction));
}

// SRD (Miles & Mikolajczyk, "Understanding the role of the projector"), torchdistill's SRDLoss:
// 2 log(sum |f_s - f_t|^exponent) on the features ("student_features", "teacher_features"), plus
// the KL of the logits ("student", "teacher": the student's features through the teacher's
// head, and the teacher's) at `temperature`.
absl::StatusOr<std::unique_ptr<Loss>> MakeSrd(const Kwargs& kwargs) {
  const double exponent = NumberKwarg(kwargs, "exponent");
  const double temperature = NumberKwarg(kwargs, "temperature");
  const std::string reduction = StringKwarg(kwargs, "reduction");
  return MakeFunctionLoss([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(LogitsAndFeatures v, ReadLogitsAndFeatures("SRDLoss", in));
    // An exponent of 1 (the default) skips the power: on small features each op is a visible cost.
    const at::Tensor distance = (v.fs - v.ft).abs();
    const at::Tensor feature = at::log((exponent == 1 ? distance : distance.pow(exponent)).sum());
    return 2 * feature + SoftKl(v.s, v.t, temperature, reduction);
  });
}

// Teacher-confidence mask of SKD's "code" mode: 1 where `confidence` is at most its median.
at::Tensor AtMostMedian(const at::Tensor& confidence) {
  return confidence.le(at::quantile(confidence, 0.5)).to(confidence.scalar_type());
}

// SKD's direction loss (torchdistill's SKDDirectionLoss): the Mahalanobis length of the
// difference of the batch's cosine Gram matrices, under their covariance plus `tikhonov` I.
// mode "code" scales the Grams by the number of classes and multiplies by the fraction of
// classes whose summed teacher confidence is at most the median, as torchdistill's code does.
absl::StatusOr<std::unique_ptr<Loss>> MakeSkdDirection(const Kwargs& kwargs) {
  const double tikhonov = NumberKwarg(kwargs, "tikhonov");
  const bool paper = StringKwarg(kwargs, "mode") == "paper";
  return MakeStudentTeacherLoss(
      "SKDDirectionLoss", PairShape::kSame, [=](const at::Tensor& s, const at::Tensor& t) {
        const double scale = paper ? 1.0 : static_cast<double>(s.size(1));
        auto gram = [scale](const at::Tensor& x) {
          const at::Tensor n = L2Normalize(x, 1);
          return at::mm(n, n.t()) / scale;
        };
        const at::Tensor diff = gram(s) - gram(t);
        const at::Tensor cov = at::cov(diff.t()) + tikhonov * at::eye(diff.size(1), diff.options());
        const at::Tensor inverse = at::cholesky_inverse(at::linalg_cholesky(cov));
        const at::Tensor distance = at::einsum("bi,ij,bj->b", {diff, inverse, diff}).sqrt().mean();
        if (paper) return distance;
        return (distance * AtMostMedian(at::softmax(t.detach(), 1).sum(0))).mean();
      });
}

// SKD's instance loss (torchdistill's SKDInstanceLoss): mode "paper", the batch-mean KL at
// `temperature`; mode "code", the per-sample KL times T^2 on samples whose teacher confidence is
// at most the median, averaged over the batch.
absl::StatusOr<std::unique_ptr<Loss>> MakeSkdInstance(const Kwargs& kwargs) {
  const double temperature = NumberKwarg(kwargs, "temperature");
  const bool paper = StringKwarg(kwargs, "mode") == "paper";
  return MakeStudentTeacherLoss(
      "SKDInstanceLoss", PairShape::kSame, [=](const at::Tensor& s, const at::Tensor& t) {
        if (paper) return SoftKl(s, t, temperature, "batchmean");
        const at::Tensor kl = at::kl_div(at::log_softmax(s / temperature, 1),
                                         at::softmax(t / temperature, 1), at::Reduction::None)
                                  .sum(1) *
                              (temperature * temperature);
        return (kl * AtMostMedian(std::get<0>(at::softmax(t.detach(), 1).max(1)))).mean();
      });
}

KwargSpec ModeSpec() {
  return {
      .name = "mode",
      .type = KwargType::kString,
      .doc = "paper (the paper's formula) or code (torchdistill's reading of the authors' code)",
      .default_value = "paper",
      .choices = {"paper", "code"}};
}

KD_REGISTER(LossRegistry(), "DISTPlusLoss", MakeDistPlus,
            {NonNegativeNumberSpec("beta", "inter-class relation's weight", 1.0),
             NonNegativeNumberSpec("gamma", "intra-class relation's weight", 1.0),
             {.name = "iota",
              .type = KwargType::kNumber,
              .doc = "channel relation's weight",
              .default_value = 1.0},
             {.name = "kappa",
              .type = KwargType::kNumber,
              .doc = "spatial relation's weight",
              .default_value = 1.0},
             PositiveNumberSpec("tau", "softening temperature", 1.0),
             NonNegativeNumberSpec("eps", "guards the correlations", 1e-8)});
KD_REGISTER(LossRegistry(), "SRDLoss", MakeSrd,
            {{.name = "exponent",
              .type = KwargType::kNumber,
              .doc = "of the feature distance",
              .default_value = 1.0},
             PositiveNumberSpec("temperature", "softening T", 1.0),
             ReductionKwargSpec({"batchmean", "mean", "sum"}, "batchmean")});
KD_REGISTER(LossRegistry(), "SKDDirectionLoss", MakeSkdDirection,
            {NonNegativeNumberSpec("tikhonov", "the covariance's ridge", 0.1), ModeSpec()});
KD_REGISTER(LossRegistry(), "SKDInstanceLoss", MakeSkdInstance,
            {PositiveNumberSpec("temperature", "softening T", 4.0), ModeSpec()});
// torchdistill's import rules (//tools:import_torchdistill).
// Logits and features (DIST+'s and SRD's inputs, ReadLogitsAndFeatures) from
// {student,teacher}_<logits>_module_{path,io} and {student,teacher}_feature_module_{path,io}.
TorchdistillLossRule LogitsAndFeaturesRule(const std::string& logits) {
  TorchdistillLossRule rule =
      TorchdistillLossRule::ModuleIoPair("student_" + logits, "teacher_" + logits);
  const TorchdistillLossRule features = TorchdistillLossRule::ModuleIoPair(
      "student_feature", "teacher_feature", "student_features", "teacher_features");
  rule.values.insert(rule.values.end(), features.values.begin(), features.values.end());
  return rule;
}
KD_REGISTER(TorchdistillLossRules(), "SRDLoss", LogitsAndFeaturesRule("linear"), kAnyKwargs);
KD_REGISTER(TorchdistillLossRules(), "DISTPlusLoss", LogitsAndFeaturesRule("logit"), kAnyKwargs);
KD_REGISTER(TorchdistillLossRules(), "SKDDirectionLoss", TorchdistillLossRule::ModuleIoPair(),
            kAnyKwargs);
KD_REGISTER(TorchdistillLossRules(), "SKDInstanceLoss", TorchdistillLossRule::ModuleIoPair(),
            kAnyKwargs);

}  // namespace
}  // namespace kd
