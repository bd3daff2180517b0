// torch.nn's losses, torchdistill's KDLoss and LogitStdKDLoss, and DKD, under their class
// names as configs key them.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/Reduction.h>

#include "absl/strings/str_cat.h"
#include "base/ivalue_util.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "distill/losses/internal/torch_losses.h"
#include "distill/losses/loss.h"
#include "distill/losses/torchdistill_rule.h"

namespace kd {
namespace {

const KwargSpec kReduction = ReductionKwargSpec();
using losses_internal::ClassWeight;
using losses_internal::ClassWeightKwarg;
using losses_internal::ClassWeightSpec;
using losses_internal::Compared;
using losses_internal::CrossEntropy;
using losses_internal::Elementwise;
using losses_internal::IgnoreIndexSpec;
using losses_internal::KlDiv;
using losses_internal::LabelSmoothingSpec;
using losses_internal::Make;

// CrossEntropyLoss's kwargs but its reduction (KDLoss takes them too).
std::vector<KwargSpec> CrossEntropySpecs() {
  return {ClassWeightSpec(), IgnoreIndexSpec(), LabelSmoothingSpec()};
}

absl::StatusOr<std::unique_ptr<Loss>> MakeCrossEntropy(const Kwargs& kwargs) {
  const CrossEntropy ce(kwargs, ReductionKwarg(kwargs));
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(at::Tensor input, in.Get("CrossEntropyLoss", "input"));
    KD_ASSIGN_OR_RETURN(at::Tensor target, in.Get("CrossEntropyLoss", "target"));
    return ce(input, target);
  });
}

absl::StatusOr<std::unique_ptr<Loss>> MakeSmoothL1(const Kwargs& kwargs) {
  const int64_t reduction = ReductionKwarg(kwargs);
  const double beta = NumberKwarg(kwargs, "beta");
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(auto compared, Compared("SmoothL1Loss", in));
    return at::smooth_l1_loss(compared.first, compared.second, reduction, beta);
  });
}

absl::StatusOr<std::unique_ptr<Loss>> MakeKlDiv(const Kwargs& kwargs) {
  const std::string reduction = StringKwarg(kwargs, "reduction");
  const bool log_target = BoolKwarg(kwargs, "log_target");
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(auto compared, Compared("KLDivLoss", in));
    return KlDiv(compared.first, compared.second, reduction, log_target);
  });
}

// torch.nn.BCEWithLogitsLoss: `weight` rescales each element (broadcast), `pos_weight` the
// positive term per class (the last dimension).
absl::StatusOr<std::unique_ptr<Loss>> MakeBceWithLogits(const Kwargs& kwargs) {
  const int64_t reduction = ReductionKwarg(kwargs);
  const std::optional<std::vector<double>> weight = ClassWeightKwarg(kwargs);
  const std::optional<std::vector<double>> pos_weight =
      FindKwarg(kwargs, "pos_weight") == nullptr
          ? std::nullopt
          : std::optional<std::vector<double>>(NumberListKwarg(kwargs, "pos_weight"));
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(auto compared, Compared("BCEWithLogitsLoss", in));
    return at::binary_cross_entropy_with_logits(compared.first, compared.second,
                                                ClassWeight(weight, compared.first),
                                                ClassWeight(pos_weight, compared.first), reduction);
  });
}

absl::StatusOr<std::unique_ptr<Loss>> MakeCosineEmbedding(const Kwargs& kwargs) {
  const int64_t reduction = ReductionKwarg(kwargs);
  const double margin = NumberKwarg(kwargs, "margin");
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(at::Tensor a, in.Get("CosineEmbeddingLoss", "input1"));
    KD_ASSIGN_OR_RETURN(at::Tensor b, in.Get("CosineEmbeddingLoss", "input2"));
    KD_ASSIGN_OR_RETURN(at::Tensor target, in.Get("CosineEmbeddingLoss", "target"));
    KD_RETURN_IF_ERROR(SameShape("CosineEmbeddingLoss", a, b, "input1", "input2"));
    return at::cosine_embedding_loss(a, b, target, margin, reduction);
  });
}

// torchdistill's KDLoss (Hinton et al. 2015), its definition and quirks included:
//   soft = KLDivLoss(reduction)(log_softmax(student / T), softmax(teacher / T))
//   loss = alpha * CE(student, targets) + beta * T^2 * soft,  beta = 1 - alpha by default;
// with alpha unset or 0, or no targets, the loss is `soft` alone, without the T^2 factor
// (torchdistill's behaviour, kept so that configs give the same numbers). CE's reduction is
// "mean" when the KL reduction is "batchmean".
// `standardize`: torchdistill's LogitStdKDLoss (Sun et al. 2024, "Logit Standardization in
// Knowledge Distillation"): both logits z-scored over classes, (z - mean) / (eps + std), before
// the temperature; the CE term still reads the raw student logits.
absl::StatusOr<std::unique_ptr<Loss>> MakeKdWith(const Kwargs& kwargs, bool standardize) {
  const double eps = standardize ? NumberKwarg(kwargs, "eps") : 0.0;
  auto prepare = [standardize, eps](const at::Tensor& logits) {
    return standardize ? Standardize(logits, eps) : logits;
  };
  const double t = NumberKwarg(kwargs, "temperature");
  const bool has_alpha = FindKwarg(kwargs, "alpha") != nullptr;
  const double alpha = has_alpha ? NumberKwarg(kwargs, "alpha") : 0.0;
  // beta's default depends on alpha, so the spec cannot hold it.
  const double beta = FindKwarg(kwargs, "beta") ? NumberKwarg(kwargs, "beta") : 1.0 - alpha;
  const std::string reduction = StringKwarg(kwargs, "reduction");
  const CrossEntropy ce(kwargs, ReductionEnum(reduction == "batchmean" ? "mean" : reduction));
  const std::string key = standardize ? "LogitStdKDLoss" : "KDLoss";
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(at::Tensor student, in.Get(key, "student"));
    KD_ASSIGN_OR_RETURN(at::Tensor teacher, in.Get(key, "teacher"));
    KD_RETURN_IF_ERROR(SameShape(key, student, teacher, "student", "teacher"));
    const at::Tensor soft =
        KlDiv(at::log_softmax(prepare(student) / t, 1), at::softmax(prepare(teacher) / t, 1),
              reduction, /*log_target=*/false);
    const at::Tensor targets = in.GetOptional("targets");
    if (!has_alpha || alpha == 0 || !targets.defined()) return soft;
    const at::Tensor hard = ce(student, targets);
    return alpha * hard + beta * (t * t) * soft;
  });
}

absl::StatusOr<std::unique_ptr<Loss>> MakeKd(const Kwargs& kwargs) {
  return MakeKdWith(kwargs, /*standardize=*/false);
}
absl::StatusOr<std::unique_ptr<Loss>> MakeLogitStdKd(const Kwargs& kwargs) {
  return MakeKdWith(kwargs, /*standardize=*/true);
}

// Decoupled KD (Zhao et al., CVPR 2022), Eq. 7 as the authors' mdistiller computes it:
//   alpha * TCKD + beta * NCKD, both times T^2 and divided by the batch, where TCKD is the KL of
//   the binary (target class, the rest) probabilities and NCKD the KL among the non-target
//   classes (the target logit pushed down by 1000/T before the softmax).
// mdistiller's CE term and its linear warm-up of the DKD weight over the first epochs are not in
// the loss: a CrossEntropyLoss term, and the DKD term's weight and warmup_epochs (20 in
// mdistiller), give them.
absl::StatusOr<std::unique_ptr<Loss>> MakeDkd(const Kwargs& kwargs) {
  const double alpha = NumberKwarg(kwargs, "alpha");
  const double beta = NumberKwarg(kwargs, "beta");
  const double t = NumberKwarg(kwargs, "temperature");
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(at::Tensor student, in.Get("DKDLoss", "student"));
    KD_ASSIGN_OR_RETURN(at::Tensor teacher, in.Get("DKDLoss", "teacher"));
    KD_ASSIGN_OR_RETURN(at::Tensor targets, in.Get("DKDLoss", "targets"));
    KD_RETURN_IF_ERROR(SameShape("DKDLoss", student, teacher, "student", "teacher"));
    if (student.dim() != 2 || targets.dim() != 1 || targets.size(0) != student.size(0) ||
        at::isFloatingType(targets.scalar_type())) {
      return absl::InvalidArgumentError(
          absl::StrCat("loss \"DKDLoss\": needs logits (N, C) and class indices (N), got student ",
                       ShapeString(student), " and targets ", ShapeString(targets), " of ",
                       c10::toString(targets.scalar_type())));
    }
    const at::Tensor gt = at::zeros_like(student).scatter_(1, targets.unsqueeze(1), 1.0);
    const at::Tensor other = 1 - gt;
    auto binary = [&](const at::Tensor& p) {
      return at::cat({(p * gt).sum(1, /*keepdim=*/true), (p * other).sum(1, /*keepdim=*/true)}, 1);
    };
    const int64_t n = student.size(0);
    const at::Tensor tckd = at::kl_div(at::log(binary(at::softmax(student / t, 1))),
                                       binary(at::softmax(teacher / t, 1)), at::Reduction::Sum);
    const at::Tensor nckd =
        at::kl_div(at::log_softmax(student / t - 1000.0 * gt, 1),
                   at::softmax(teacher / t - 1000.0 * gt, 1), at::Reduction::Sum);
    return (alpha * tckd + beta * nckd) * (t * t) / n;
  });
}

KD_REGISTER(LossRegistry(), "MSELoss", Elementwise<at::mse_loss>("MSELoss"), {kReduction});
KD_REGISTER(LossRegistry(), "L1Loss", Elementwise<at::l1_loss>("L1Loss"), {kReduction});
KD_REGISTER(LossRegistry(), "SmoothL1Loss", MakeSmoothL1,
            {kReduction, NonNegativeNumberSpec("beta", "L1/L2 switch", 1.0)});
std::vector<KwargSpec> WithReduction(std::vector<KwargSpec> specs) {
  specs.insert(specs.begin(), kReduction);
  return specs;
}

KD_REGISTER(LossRegistry(), "CrossEntropyLoss", MakeCrossEntropy,
            WithReduction(CrossEntropySpecs()));
KD_REGISTER(LossRegistry(), "KLDivLoss", MakeKlDiv,
            {{.name = "reduction",
              .type = KwargType::kString,
              .doc = "batchmean, mean (torch's default), sum or none",
              .default_value = "mean",
              .choices = {"mean", "batchmean", "sum", "none"}},
             {.name = "log_target",
              .type = KwargType::kBool,
              .doc = "target is log-probs",
              .default_value = false}});
KD_REGISTER(LossRegistry(), "BCEWithLogitsLoss", MakeBceWithLogits,
            {kReduction,
             ClassWeightSpec(),
             {.name = "pos_weight",
              .type = KwargType::kNumberList,
              .doc = "the positive term's weight per class; unset: 1 each"}});
KD_REGISTER(LossRegistry(), "CosineEmbeddingLoss", MakeCosineEmbedding,
            {kReduction,
             {.name = "margin",
              .type = KwargType::kNumber,
              .doc = "-1 to 1",
              .default_value = 0.0,
              .min = -1,
              .max = 1}});
// KDLoss's kwargs, which LogitStdKDLoss shares (plus its eps).
std::vector<KwargSpec> KdSpecs() {
  return {{.name = "temperature",
           .type = KwargType::kNumber,
           .doc = "softening T",
           .min = 0,
           .min_exclusive = true,
           .required = true},
          {.name = "alpha",
           .type = KwargType::kNumber,
           .doc = "weight of CE; unset: KL only",
           .min = 0,
           .max = 1},
          {.name = "beta",
           .type = KwargType::kNumber,
           .doc = "weight of T^2 KL; unset: 1 - alpha",
           .min = 0},
          {.name = "reduction",
           .type = KwargType::kString,
           .doc = "KL's",
           .default_value = "batchmean",
           .choices = {"batchmean", "mean", "sum"}}};
}

// KDLoss's own kwargs, then what it hands its CrossEntropyLoss (torchdistill's **kwargs).
std::vector<KwargSpec> KdWithCrossEntropySpecs() {
  std::vector<KwargSpec> specs = KdSpecs();
  for (KwargSpec& spec : CrossEntropySpecs()) {
    spec.doc = absl::StrCat("its CrossEntropyLoss's: ", spec.doc);
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::vector<KwargSpec> LogitStdKdSpecs() {
  std::vector<KwargSpec> specs = KdWithCrossEntropySpecs();
  specs.push_back(NonNegativeNumberSpec("eps", "std's guard", 1e-7));
  return specs;
}

KD_REGISTER(LossRegistry(), "KDLoss", MakeKd, KdWithCrossEntropySpecs());
KD_REGISTER(LossRegistry(), "DKDLoss", MakeDkd,
            {NonNegativeNumberSpec("alpha", "TCKD weight", 1.0),
             NonNegativeNumberSpec("beta", "NCKD weight", 8.0),
             PositiveNumberSpec("temperature", "softening T", 4.0)});
KD_REGISTER(LossRegistry(), "LogitStdKDLoss", MakeLogitStdKd, LogitStdKdSpecs());

// torchdistill's KDLoss and LogitStdKDLoss name the two logits by module path and io; their
// cross-entropy **kwargs are libkd's KDLoss's kwargs already.
KD_REGISTER(
    TorchdistillLossRules(), "KDLoss",
    [] {
      TorchdistillLossRule rule = TorchdistillLossRule::ModuleIoPair();
      rule.reads_targets = true;
  rule.outputs_by_default = true;  // 0.x: (student_output, teacher_output, targets)
      return rule;
    }(),
    kAnyKwargs);
KD_REGISTER(
    TorchdistillLossRules(), "LogitStdKDLoss",
    [] {
      TorchdistillLossRule rule = TorchdistillLossRule::ModuleIoPair();
      rule.reads_targets = true;
  rule.outputs_by_default = true;  // 0.x: (student_output, teacher_output, targets)
      return rule;
    }(),
    kAnyKwargs);

}  // namespace
}  // namespace kd
