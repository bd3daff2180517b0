// torchdistill's other mid-level losses that read recorded values only (its
// torchdistill/losses/mid_level.py, 1.1.5), with its definitions, kwargs and defaults: FT, KTA,
// AltActTransfer, Regularization, ChSim, Affinity, HierarchicalContext, PADL2, VID (those on
// logits: logit_losses.cc). torchdistill's module-path kwargs (paraphraser_path,
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

KD_REGISTER(LossRegistry(), "FTLoss", FactorDistance("FTLoss", /*has_q=*/false),
            {PositiveNumberSpec("p", "the distance's norm", 1.0),
             ReductionKwargSpec({"mean", "sum"}, "mean")});
KD_REGISTER(LossRegistry(), "KTALoss", FactorDistance("KTALoss", /*has_q=*/true),
            {PositiveNumberSpec("p", "the distance's norm", 1.0),
             PositiveNumberSpec("q", "the factors' normalizing norm", 2.0),
             ReductionKwargSpec({"mean", "sum"}, "mean")});
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
KD_REGISTER(LossRegistry(), "AffinityLoss", MakeAffinity,
            {ReductionKwargSpec({"mean", "sum"}, "mean")});
KD_REGISTER(LossRegistry(), "HierarchicalContextLoss", MakeHierarchicalContext,
            {ReductionKwargSpec(),
             {.name = "output_sizes",
              .type = KwargType::kIntegerList,
              .doc = "the pooled maps' sizes",
              .default_value = std::vector<int64_t>{4, 2, 1},
              .min = 1}});
KD_REGISTER(LossRegistry(), "PADL2Loss", MakePadL2,
            {NonNegativeNumberSpec("eps", "guards the variance", 1e-6),
             ReductionKwargSpec({"mean", "sum"}, "mean")});
KD_REGISTER(LossRegistry(), "VIDLoss", MakeVid, {});

// torchdistill's import rules (//tools:import_torchdistill).
// FTLoss: the student's translator and the teacher's paraphraser by path (their names by
// default, as torchdistill's).
KD_REGISTER(TorchdistillLossRules(), "FTLoss",
            TorchdistillLossRule::PathPair("translator_path", "paraphraser_path", "translator",
                                           "paraphraser"),
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
// KTALoss: the student's feature adapter and the teacher's knowledge translator (torchdistill's
// default paths: feature_adapter, paraphraser).
KD_REGISTER(TorchdistillLossRules(), "KTALoss",
            TorchdistillLossRule::PathPair("feature_adapter_path", "knowledge_translator_path",
                                           "feature_adapter", "paraphraser"),
            kAnyKwargs);
// RegularizationLoss: one value, the student's or (is_from_teacher) the teacher's.
KD_REGISTER(TorchdistillLossRules(), "RegularizationLoss",
            TorchdistillLossRule{.values = {{.arg = "input",
                                             .path_kwarg = "module_path",
                                             .io_kwarg = "io_type",
                                             .from_teacher_kwarg = "is_from_teacher"}}},
            kAnyKwargs);
KD_REGISTER(
    TorchdistillLossRules(), "HierarchicalContextLoss",
    [] {
      TorchdistillLossRule rule = TorchdistillLossRule::ModuleIoPair();
      // the student's value is a fusion's (output, residual): torchdistill's loss unpacks its
      // output
      rule.values[0].element = 0;
      // torchdistill's knowledge-review sample passes kernel_sizes, which its class takes into
      // **kwargs and ignores
      rule.dropped = {{"kernel_sizes",
                       "ignored, as torchdistill's HierarchicalContextLoss ignores it "
                       "(its **kwargs); the pooling sizes are output_sizes"}};
      return rule;
    }(),
    kAnyKwargs);
}  // namespace
}  // namespace kd
