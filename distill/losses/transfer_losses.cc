// torchdistill's other mid-level losses that read recorded values only (its
// torchdistill/losses/mid_level.py, 1.1.5), with its definitions, kwargs and defaults: FT, KTA,
// AltActTransfer, Regularization, ChSim, Affinity, DISTPlus, SRD, HierarchicalContext, PADL2,
// VID, SKD direction and instance. torchdistill's module-path kwargs (paraphraser_path,
// student_module_path, ...) are the term's inputs here, and its pair lists one term each (a
// pair's weight the term's).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "base/ivalue_util.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "distill/losses/loss.h"
#include "distill/losses/torchdistill_rule.h"

namespace kd {
namespace {

absl::StatusOr<std::unique_ptr<Loss>> Pair(
    std::string key, PairShape shape,
    std::function<at::Tensor(const at::Tensor& student, const at::Tensor& teacher)> fn) {
  return MakeStudentTeacherLoss(std::move(key), shape, std::move(fn));
}

absl::StatusOr<std::unique_ptr<Loss>> Make(LossFn fn) { return MakeFunctionLoss(std::move(fn)); }

bool Mean(const Kwargs& kwargs) { return StringKwarg(kwargs, "reduction") == "mean"; }

// x / ||x||_q over dim 1 of x flattened from dim 1 (no guard: torchdistill divides by the norm).
at::Tensor FlatNormalized(const at::Tensor& x, double q) {
  const at::Tensor flat = x.flatten(1);
  return flat / flat.norm(q, 1).unsqueeze(1);
}

// Factor transfer (Kim et al. 2018) and KTAAD (Liu et al. 2021): an L_p distance between the
// student's translated and the teacher's paraphrased factors, each normalized by its L_q norm
// (q 2 for FT). FTLoss reads the translator's output ("student") and the paraphraser's
// ("teacher"); KTALoss the feature adapter's and the knowledge translator's.
LossFactory FactorDistance(std::string key, bool has_q) {
  return [key, has_q](const Kwargs& kwargs) {
    const double p = NumberKwarg(kwargs, "p");
    const double q = has_q ? NumberKwarg(kwargs, "q") : 2.0;
    const bool mean = Mean(kwargs);
    return Pair(key, PairShape::kSameBatch, [=](const at::Tensor& s, const at::Tensor& t) {
      const at::Tensor ns = FlatNormalized(s, q), nt = FlatNormalized(t, q);
      if (p == 1) {
        return at::l1_loss(ns, nt, mean ? at::Reduction::Mean : at::Reduction::Sum);
      }
      const at::Tensor distance = (ns - nt).norm(p, 1);
      return mean ? distance.mean() : distance.sum();
    });
  };
}

// Activation boundaries (Heo et al. 2019), torchdistill's AltActTransferLoss: the student's
// pre-activations pushed past `margin` on the teacher's side of 0; "mean" divides the sum by the
// batch.
absl::StatusOr<std::unique_ptr<Loss>> MakeAltActTransfer(const Kwargs& kwargs) {
  const double m = NumberKwarg(kwargs, "margin");
  const bool mean = Mean(kwargs);
  return Pair("AltActTransferLoss", PairShape::kSame,
              [=](const at::Tensor& s, const at::Tensor& t) {
                const at::Tensor loss = (s + m).pow(2) * ((s > -m) & (t <= 0)).to(s.scalar_type()) +
                                        (s - m).pow(2) * ((s <= m) & (t > 0)).to(s.scalar_type());
                const at::Tensor total = loss.abs().sum();
                return mean ? total / s.size(0) : total;
              });
}

// torchdistill's RegularizationLoss: the L_p norm of one recorded value ("input", from either
// model).
absl::StatusOr<std::unique_ptr<Loss>> MakeRegularization(const Kwargs& kwargs) {
  const double p = NumberKwarg(kwargs, "p");
  return Make([p](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(at::Tensor z, in.Get("RegularizationLoss", "input"));
    return z.norm(p);
  });
}

// Channel similarity (ChSim): the rows of each sample's channel Gram matrix, L2-normalized,
// compared by squared difference over channels * batch^2.
absl::StatusOr<std::unique_ptr<Loss>> MakeChSim(const Kwargs&) {
  return Pair("ChSimLoss", PairShape::kSame, [](const at::Tensor& s, const at::Tensor& t) {
    const int64_t b = s.size(0), ch = s.size(1);
    auto gram = [&](const at::Tensor& f) {
      const at::Tensor flat = f.reshape({b, ch, -1});
      return L2Normalize(at::bmm(flat, flat.transpose(1, 2)), 2);
    };
    const at::Tensor diff = gram(s) - gram(t);
    return (diff * diff).sum() / static_cast<double>(ch * b * b);
  });
}

// Affinity (torchdistill's AffinityLoss, from Li et al.'s local affinity): per channel, the
// normalized spatial self-affinities of student and teacher, their Frobenius distance / hw,
// summed over channels; mean or sum over the batch. Channel by channel, as torchdistill
// computes it (an hw x hw matrix alive at a time).
absl::StatusOr<std::unique_ptr<Loss>> MakeAffinity(const Kwargs& kwargs) {
  const bool mean = Mean(kwargs);
  return Pair("AffinityLoss", PairShape::kSame, [=](const at::Tensor& s, const at::Tensor& t) {
    const at::Tensor fs = s.flatten(2), ft = t.flatten(2);
    const int64_t ch = fs.size(1), hw = fs.size(2);
    const at::Tensor ns = fs / fs.norm(2, 2).unsqueeze(-1);
    const at::Tensor nt = ft / ft.norm(2, 2).unsqueeze(-1);
    at::Tensor total = at::zeros({fs.size(0)}, fs.options());
    for (int64_t c = 0; c < ch; ++c) {
      const at::Tensor a = ns.select(1, c), b = nt.select(1, c);
      const at::Tensor diff =
          (at::bmm(a.unsqueeze(2), a.unsqueeze(1)) - at::bmm(b.unsqueeze(2), b.unsqueeze(1))) /
          static_cast<double>(hw);
      total = total + diff.flatten(1).norm(2, 1);  // Frobenius
    }
    return mean ? total.mean() : total.sum();
  });
}

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
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
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
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(LogitsAndFeatures v, ReadLogitsAndFeatures("SRDLoss", in));
    // An exponent of 1 (the default) skips the power: on small features each op is a visible cost.
    const at::Tensor distance = (v.fs - v.ft).abs();
    const at::Tensor feature = at::log((exponent == 1 ? distance : distance.pow(exponent)).sum());
    return 2 * feature + SoftKl(v.s, v.t, temperature, reduction);
  });
}

// Knowledge review's hierarchical context loss (Chen et al. 2021): MSE of the feature maps and
// of their adaptive average pools at each output size smaller than the map, weighted 1, 1/2,
// 1/4, ..., divided by the weights' sum.
absl::StatusOr<std::unique_ptr<Loss>> MakeHierarchicalContext(const Kwargs& kwargs) {
  const int64_t reduction = ReductionKwarg(kwargs);
  const std::vector<int64_t> sizes = IntListKwarg(kwargs, "output_sizes");
  return Pair(
      "HierarchicalContextLoss", PairShape::kSame, [=](const at::Tensor& s, const at::Tensor& t) {
        const int64_t h = s.size(2);
        at::Tensor loss = at::mse_loss(s, t, reduction);
        double weight = 1, total = 1;
        for (int64_t k : sizes) {
          if (k >= h) continue;
          weight /= 2;
          loss = loss + weight * at::mse_loss(at::adaptive_avg_pool2d(s, {k, k}),
                                              at::adaptive_avg_pool2d(t, {k, k}), reduction);
          total += weight;
        }
        return loss / total;
      });
}

// Prime-aware adaptive distillation (Zhang et al. 2020), torchdistill's PADL2Loss: the squared
// embedding distance scaled by the student's predicted variance ("log_variances", its variance
// estimator's output), plus the log variance, averaged over dimensions.
absl::StatusOr<std::unique_ptr<Loss>> MakePadL2(const Kwargs& kwargs) {
  const double eps = NumberKwarg(kwargs, "eps");
  const bool mean = Mean(kwargs);
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(at::Tensor log_var, in.Get("PADL2Loss", "log_variances"));
    KD_ASSIGN_OR_RETURN(at::Tensor s, in.Get("PADL2Loss", "student"));
    KD_ASSIGN_OR_RETURN(at::Tensor t, in.Get("PADL2Loss", "teacher"));
    const at::Tensor squared =
        ((t.flatten(1) - s.flatten(1)).pow(2) / (eps + at::exp(log_var)) + log_var).mean(1);
    return mean ? squared.mean() : squared.sum();
  });
}

// Variational information distillation (Ahn et al. 2019), one of torchdistill's feature pairs:
// the Gaussian negative log-likelihood of the teacher's map under the student's predicted mean
// and variance ("pred_mean", "pred_var": its variational distributor's outputs), averaged.
absl::StatusOr<std::unique_ptr<Loss>> MakeVid(const Kwargs&) {
  return Make([](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(at::Tensor mean, in.Get("VIDLoss", "pred_mean"));
    KD_ASSIGN_OR_RETURN(at::Tensor var, in.Get("VIDLoss", "pred_var"));
    KD_ASSIGN_OR_RETURN(at::Tensor t, in.Get("VIDLoss", "teacher"));
    KD_RETURN_IF_ERROR(SameShape("VIDLoss", mean, t, "pred_mean", "teacher"));
    return (0.5 * ((mean - t).pow(2) / var + at::log(var))).mean();
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
  return Pair("SKDDirectionLoss", PairShape::kSame, [=](const at::Tensor& s, const at::Tensor& t) {
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
  return Pair("SKDInstanceLoss", PairShape::kSame, [=](const at::Tensor& s, const at::Tensor& t) {
    if (paper) return SoftKl(s, t, temperature, "batchmean");
    const at::Tensor kl = at::kl_div(at::log_softmax(s / temperature, 1),
                                     at::softmax(t / temperature, 1), at::Reduction::None)
                              .sum(1) *
                          (temperature * temperature);
    return (kl * AtMostMedian(std::get<0>(at::softmax(t.detach(), 1).max(1)))).mean();
  });
}

KwargSpec Reduction(std::vector<std::string> choices, std::string default_value) {
  return {.name = "reduction",
          .type = KwargType::kString,
          .doc = "the reduction over the batch",
          .default_value = std::move(default_value),
          .choices = std::move(choices)};
}

KwargSpec ModeSpec() {
  return {
      .name = "mode",
      .type = KwargType::kString,
      .doc = "paper (the paper's formula) or code (torchdistill's reading of the authors' code)",
      .default_value = "paper",
      .choices = {"paper", "code"}};
}

KD_REGISTER(LossRegistry(), "FTLoss", FactorDistance("FTLoss", /*has_q=*/false),
            {PositiveNumberSpec("p", "the distance's norm", 1.0),
             Reduction({"mean", "sum"}, "mean")});
KD_REGISTER(LossRegistry(), "KTALoss", FactorDistance("KTALoss", /*has_q=*/true),
            {PositiveNumberSpec("p", "the distance's norm", 1.0),
             PositiveNumberSpec("q", "the factors' normalizing norm", 2.0),
             Reduction({"mean", "sum"}, "mean")});
KD_REGISTER(LossRegistry(), "AltActTransferLoss", MakeAltActTransfer,
            {{.name = "margin",
              .type = KwargType::kNumber,
              .doc = "the activation boundary's margin",
              .min = 0,
              .required = true},
             {.name = "reduction",
              .type = KwargType::kString,
              .doc = "mean (divided by the batch) or sum",
              .choices = {"mean", "sum"},
              .required = true}});
KD_REGISTER(LossRegistry(), "RegularizationLoss", MakeRegularization,
            {PositiveNumberSpec("p", "the norm", 1.0)});
KD_REGISTER(LossRegistry(), "ChSimLoss", MakeChSim, {});
KD_REGISTER(LossRegistry(), "AffinityLoss", MakeAffinity, {Reduction({"mean", "sum"}, "mean")});
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
             Reduction({"batchmean", "mean", "sum"}, "batchmean")});
KD_REGISTER(LossRegistry(), "HierarchicalContextLoss", MakeHierarchicalContext,
            {ReductionKwargSpec(),
             {.name = "output_sizes",
              .type = KwargType::kIntegerList,
              .doc = "the pooled maps' sizes",
              .default_value = std::vector<int64_t>{4, 2, 1},
              .min = 1}});
KD_REGISTER(LossRegistry(), "PADL2Loss", MakePadL2,
            {NonNegativeNumberSpec("eps", "guards the variance", 1e-6),
             Reduction({"mean", "sum"}, "mean")});
KD_REGISTER(LossRegistry(), "VIDLoss", MakeVid, {});
KD_REGISTER(LossRegistry(), "SKDDirectionLoss", MakeSkdDirection,
            {NonNegativeNumberSpec("tikhonov", "the covariance's ridge", 0.1), ModeSpec()});
KD_REGISTER(LossRegistry(), "SKDInstanceLoss", MakeSkdInstance,
            {PositiveNumberSpec("temperature", "softening T", 4.0), ModeSpec()});

// torchdistill's import rules (//tools:import_torchdistill).
// FTLoss: the student's translator and the teacher's paraphraser by path (their names by
// default, as torchdistill's).
KD_REGISTER(TorchdistillLossRules(), "FTLoss",
            TorchdistillLossRule{.values = {{.arg = "student",
                                             .path_kwarg = "translator_path",
                                             .default_path = "translator"},
                                            {.arg = "teacher",
                                             .from_teacher = true,
                                             .path_kwarg = "paraphraser_path",
                                             .default_path = "paraphraser"}}},
            kAnyKwargs);
KD_REGISTER(TorchdistillLossRules(), "ChSimLoss",
            TorchdistillLossRule::Pairs("feature_pairs", {"student", "teacher"}), kAnyKwargs);
KD_REGISTER(TorchdistillLossRules(), "AltActTransferLoss",
            TorchdistillLossRule::Pairs("feature_pairs", {"student", "teacher"}), kAnyKwargs);
KD_REGISTER(
    TorchdistillLossRules(), "VIDLoss",
    [] {
      // The student's value of a pair is its VariationalDistributor4VID regressor's (mean,
      // variance).
      TorchdistillLossRule rule =
          TorchdistillLossRule::Pairs("feature_pairs", {"student", "teacher"});
      rule.pair_members[0].elements = {{"pred_mean", 0}, {"pred_var", 1}};
      rule.dropped = {{"margin", "ignored, as torchdistill's VIDLoss ignores it (its **kwargs)"}};
      return rule;
    }(),
    kAnyKwargs);
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
KD_REGISTER(
    TorchdistillLossRules(), "PADL2Loss",
    [] {
      // The embeddings by module path and io, and the student's variance estimator's log-variances.
      TorchdistillLossRule rule =
          TorchdistillLossRule::ModuleIoPair("student_embed", "teacher_embed");
      rule.values.push_back(
          {.arg = "log_variances", .path_kwarg = "module_path", .io_kwarg = "module_io"});
      return rule;
    }(),
    kAnyKwargs);
KD_REGISTER(TorchdistillLossRules(), "AffinityLoss", TorchdistillLossRule::ModuleIoPair(),
            kAnyKwargs);
KD_REGISTER(
    TorchdistillLossRules(), "HierarchicalContextLoss",
    [] {
      TorchdistillLossRule rule = TorchdistillLossRule::ModuleIoPair();
      // torchdistill's knowledge-review sample passes kernel_sizes, which its class takes into
      // **kwargs and ignores
      rule.dropped = {{"kernel_sizes",
                       "ignored, as torchdistill's HierarchicalContextLoss ignores it "
                       "(its **kwargs); the pooling sizes are output_sizes"}};
      return rule;
    }(),
    kAnyKwargs);
KD_REGISTER(TorchdistillLossRules(), "SKDDirectionLoss", TorchdistillLossRule::ModuleIoPair(),
            kAnyKwargs);
KD_REGISTER(TorchdistillLossRules(), "SKDInstanceLoss", TorchdistillLossRule::ModuleIoPair(),
            kAnyKwargs);

}  // namespace
}  // namespace kd
