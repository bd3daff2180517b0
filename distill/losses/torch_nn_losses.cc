// The rest of torch.nn's losses, which torchdistill's configs may name as criterion terms: under
// their class names, with torch's kwargs, defaults and input names (standard_losses.cc holds
// MSE, L1, SmoothL1, CrossEntropy, KLDiv, BCEWithLogits, CosineEmbedding).
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/Reduction.h>
#include <ATen/core/grad_mode.h>

#include "absl/strings/str_cat.h"
#include "base/ivalue_util.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "distill/losses/internal/torch_losses.h"
#include "distill/losses/loss.h"

namespace kd {
namespace {

using losses_internal::ClassWeight;
using losses_internal::ClassWeightKwarg;
using losses_internal::ClassWeightSpec;
using losses_internal::Compared;
using losses_internal::Elementwise;
using losses_internal::ElementwiseWith;
using losses_internal::IgnoreIndexSpec;
using losses_internal::LabelSmoothingSpec;
using losses_internal::Make;

const KwargSpec kReduction = ReductionKwargSpec();

// `loss` reduced as torch reduces: mean, sum or none.
at::Tensor Reduce(const at::Tensor& loss, int64_t reduction) {
  if (reduction == at::Reduction::Mean) return loss.mean();
  if (reduction == at::Reduction::Sum) return loss.sum();
  return loss;
}

absl::StatusOr<std::unique_ptr<Loss>> MakeBce(const Kwargs& kwargs) {
  const int64_t reduction = ReductionKwarg(kwargs);
  const std::optional<std::vector<double>> weight = ClassWeightKwarg(kwargs);
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(auto compared, Compared("BCELoss", in));
    return at::binary_cross_entropy(compared.first, compared.second,
                                    ClassWeight(weight, compared.first), reduction);
  });
}

// NLLLoss (and its deprecated alias NLLLoss2d): input holds log-probabilities (N, C, ...).
absl::StatusOr<std::unique_ptr<Loss>> MakeNll(const Kwargs& kwargs) {
  const int64_t reduction = ReductionKwarg(kwargs);
  const int64_t ignore_index = IntKwarg(kwargs, "ignore_index");
  const std::optional<std::vector<double>> weight = ClassWeightKwarg(kwargs);
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(at::Tensor input, in.Get("NLLLoss", "input"));
    KD_ASSIGN_OR_RETURN(at::Tensor target, in.Get("NLLLoss", "target"));
    return at::nll_loss_nd(input, target, ClassWeight(weight, input), reduction, ignore_index);
  });
}

// torch.nn.functional.multilabel_soft_margin_loss: the per-class logistic loss, weighted, mean
// over classes, then reduced over the batch.
absl::StatusOr<std::unique_ptr<Loss>> MakeMultiLabelSoftMargin(const Kwargs& kwargs) {
  const int64_t reduction = ReductionKwarg(kwargs);
  const std::optional<std::vector<double>> weight = ClassWeightKwarg(kwargs);
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(auto compared, Compared("MultiLabelSoftMarginLoss", in));
    const auto& [input, target] = compared;
    at::Tensor loss = -(target * at::log_sigmoid(input) + (1 - target) * at::log_sigmoid(-input));
    if (weight.has_value()) loss = loss * ClassWeight(weight, input);
    return Reduce(loss.sum(-1) / input.size(-1), reduction);
  });
}

absl::StatusOr<std::unique_ptr<Loss>> MakeMultiLabelMargin(const Kwargs& kwargs) {
  const int64_t reduction = ReductionKwarg(kwargs);
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(at::Tensor input, in.Get("MultiLabelMarginLoss", "input"));
    KD_ASSIGN_OR_RETURN(at::Tensor target, in.Get("MultiLabelMarginLoss", "target"));
    return at::multilabel_margin_loss(input, target, reduction);
  });
}

absl::StatusOr<std::unique_ptr<Loss>> MakeMultiMargin(const Kwargs& kwargs) {
  const int64_t reduction = ReductionKwarg(kwargs);
  const int64_t p = IntKwarg(kwargs, "p");
  const double margin = NumberKwarg(kwargs, "margin");
  const std::optional<std::vector<double>> weight = ClassWeightKwarg(kwargs);
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(at::Tensor input, in.Get("MultiMarginLoss", "input"));
    KD_ASSIGN_OR_RETURN(at::Tensor target, in.Get("MultiMarginLoss", "target"));
    return at::multi_margin_loss(input, target, p, margin, ClassWeight(weight, input), reduction);
  });
}

// The (anchor, positive, negative) triple of the triplet losses, of one shape.
absl::StatusOr<std::vector<at::Tensor>> Triplet(absl::string_view loss, const LossInputs& in) {
  KD_ASSIGN_OR_RETURN(at::Tensor anchor, in.Get(loss, "anchor"));
  KD_ASSIGN_OR_RETURN(at::Tensor positive, in.Get(loss, "positive"));
  KD_ASSIGN_OR_RETURN(at::Tensor negative, in.Get(loss, "negative"));
  KD_RETURN_IF_ERROR(SameShape(loss, anchor, positive, "anchor", "positive"));
  KD_RETURN_IF_ERROR(SameShape(loss, anchor, negative, "anchor", "negative"));
  return std::vector<at::Tensor>{anchor, positive, negative};
}

absl::StatusOr<std::unique_ptr<Loss>> MakeTripletMargin(const Kwargs& kwargs) {
  const int64_t reduction = ReductionKwarg(kwargs);
  const double margin = NumberKwarg(kwargs, "margin");
  const double p = NumberKwarg(kwargs, "p");
  const double eps = NumberKwarg(kwargs, "eps");
  const bool swap = BoolKwarg(kwargs, "swap");
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(std::vector<at::Tensor> t, Triplet("TripletMarginLoss", in));
    return at::triplet_margin_loss(t[0], t[1], t[2], margin, p, eps, swap, reduction);
  });
}

// torch.nn.TripletMarginWithDistanceLoss with its default distance, pairwise_distance (a
// distance_function, a Python callable, has no config form).
absl::StatusOr<std::unique_ptr<Loss>> MakeTripletMarginWithDistance(const Kwargs& kwargs) {
  const int64_t reduction = ReductionKwarg(kwargs);
  const double margin = NumberKwarg(kwargs, "margin");
  const bool swap = BoolKwarg(kwargs, "swap");
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(std::vector<at::Tensor> t, Triplet("TripletMarginWithDistanceLoss", in));
    const at::Tensor positive = at::pairwise_distance(t[0], t[1], 2.0, 1e-6, false);
    at::Tensor negative = at::pairwise_distance(t[0], t[2], 2.0, 1e-6, false);
    if (swap) negative = at::minimum(negative, at::pairwise_distance(t[1], t[2], 2.0, 1e-6, false));
    return Reduce(at::clamp_min(margin + positive - negative, 0), reduction);
  });
}

absl::StatusOr<std::unique_ptr<Loss>> MakeMarginRanking(const Kwargs& kwargs) {
  const int64_t reduction = ReductionKwarg(kwargs);
  const double margin = NumberKwarg(kwargs, "margin");
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(at::Tensor a, in.Get("MarginRankingLoss", "input1"));
    KD_ASSIGN_OR_RETURN(at::Tensor b, in.Get("MarginRankingLoss", "input2"));
    KD_ASSIGN_OR_RETURN(at::Tensor target, in.Get("MarginRankingLoss", "target"));
    return at::margin_ranking_loss(a, b, target, margin, reduction);
  });
}

absl::StatusOr<std::unique_ptr<Loss>> MakePoissonNll(const Kwargs& kwargs) {
  const int64_t reduction = ReductionKwarg(kwargs);
  const bool log_input = BoolKwarg(kwargs, "log_input");
  const bool full = BoolKwarg(kwargs, "full");
  const double eps = NumberKwarg(kwargs, "eps");
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(auto compared, Compared("PoissonNLLLoss", in));
    return at::poisson_nll_loss(compared.first, compared.second, log_input, full, eps, reduction);
  });
}

// torch.nn.functional.gaussian_nll_loss: 0.5 (log var + (input - target)^2 / var), var clamped
// to eps without a gradient through the clamp; `var` of input's shape, or with one dimension
// fewer (one variance per sample) or a last dimension of 1.
absl::StatusOr<std::unique_ptr<Loss>> MakeGaussianNll(const Kwargs& kwargs) {
  const int64_t reduction = ReductionKwarg(kwargs);
  const bool full = BoolKwarg(kwargs, "full");
  const double eps = NumberKwarg(kwargs, "eps");
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(auto compared, Compared("GaussianNLLLoss", in));
    const auto& [input, target] = compared;
    KD_ASSIGN_OR_RETURN(at::Tensor var, in.Get("GaussianNLLLoss", "var"));
    if (!var.sizes().equals(input.sizes())) {
      const auto leading = input.sizes().slice(0, input.dim() - 1);
      if (var.dim() == input.dim() - 1 && var.sizes().equals(leading)) {
        var = var.unsqueeze(-1);
      } else if (!(var.dim() == input.dim() && var.size(-1) == 1 &&
                   var.sizes().slice(0, var.dim() - 1).equals(leading))) {
        return absl::InvalidArgumentError(
            absl::StrCat("loss \"GaussianNLLLoss\": var ", ShapeString(var), " fits neither input ",
                         ShapeString(input), " nor it without its last dimension"));
      }
    }
    if ((var < 0).any().item<bool>()) {
      return absl::InvalidArgumentError("loss \"GaussianNLLLoss\": var has a negative entry");
    }
    var = var.clone();
    {
      at::NoGradGuard no_grad;
      var.clamp_(eps);
    }
    at::Tensor loss = 0.5 * (at::log(var) + (input - target).pow(2) / var);
    if (full) loss = loss + 0.5 * std::log(2 * M_PI);
    return Reduce(loss, reduction);
  });
}

// torch.nn.CTCLoss on (T, N, C) log-probabilities; "mean" divides each loss by its target
// length first, as torch does.
absl::StatusOr<std::unique_ptr<Loss>> MakeCtc(const Kwargs& kwargs) {
  const int64_t reduction = ReductionKwarg(kwargs);
  const int64_t blank = IntKwarg(kwargs, "blank");
  const bool zero_infinity = BoolKwarg(kwargs, "zero_infinity");
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(at::Tensor log_probs, in.Get("CTCLoss", "log_probs"));
    KD_ASSIGN_OR_RETURN(at::Tensor targets, in.Get("CTCLoss", "targets"));
    KD_ASSIGN_OR_RETURN(at::Tensor input_lengths, in.Get("CTCLoss", "input_lengths"));
    KD_ASSIGN_OR_RETURN(at::Tensor target_lengths, in.Get("CTCLoss", "target_lengths"));
    return at::ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, reduction,
                        zero_infinity);
  });
}

// torch.nn.LinearCrossEntropyLoss: cross-entropy of a linear layer's logits, the layer owned
// by the loss and trained with it (torch's "linear.weight", "linear.bias"; its default
// initialization, U(-1/sqrt(in), 1/sqrt(in))). K-dimensional logits (out_features) and the
// chunked options are refused.
class LinearCrossEntropy final : public Loss {
 public:
  LinearCrossEntropy(const Kwargs& kwargs)
      : reduction_(ReductionKwarg(kwargs)),
        class_weight_(ClassWeightKwarg(kwargs)),
        ignore_index_(IntKwarg(kwargs, "ignore_index")),
        smoothing_(NumberKwarg(kwargs, "label_smoothing")) {
    const int64_t in = IntKwarg(kwargs, "in_features");
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    weight_ = at::empty({IntKwarg(kwargs, "num_classes"), in}).uniform_(-bound, bound);
    weight_.requires_grad_(true);
    if (BoolKwarg(kwargs, "bias")) {
      bias_ = at::empty({weight_.size(0)}).uniform_(-bound, bound).requires_grad_(true);
    }
  }

  absl::StatusOr<at::Tensor> Forward(const LossInputs& inputs) override {
    KD_ASSIGN_OR_RETURN(at::Tensor input, inputs.Get("LinearCrossEntropyLoss", "input"));
    KD_ASSIGN_OR_RETURN(at::Tensor target, inputs.Get("LinearCrossEntropyLoss", "target"));
    if (input.dim() == 0 || input.size(-1) != weight_.size(1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("loss \"LinearCrossEntropyLoss\": input ", ShapeString(input),
                       " does not end in its in_features, ", weight_.size(1)));
    }
    const at::Tensor logits = at::linear(input, weight_.to(input.device()),
                                         bias_.defined() ? bias_.to(input.device()) : at::Tensor());
    return at::cross_entropy_loss(logits, target, ClassWeight(class_weight_, logits), reduction_,
                                  ignore_index_, smoothing_);
  }

  std::vector<at::Tensor> Parameters() const override {
    return bias_.defined() ? std::vector<at::Tensor>{weight_, bias_}
                           : std::vector<at::Tensor>{weight_};
  }
  std::vector<std::pair<std::string, at::Tensor>> NamedState() const override {
    std::vector<std::pair<std::string, at::Tensor>> state = {{"linear.weight", weight_}};
    if (bias_.defined()) state.emplace_back("linear.bias", bias_);
    return state;
  }

 private:
  int64_t reduction_;
  std::optional<std::vector<double>> class_weight_;
  int64_t ignore_index_;
  double smoothing_;
  at::Tensor weight_, bias_;
};

absl::StatusOr<std::unique_ptr<Loss>> MakeLinearCrossEntropy(const Kwargs& kwargs) {
  if (!IntListKwarg(kwargs, "out_features").empty()) {
    return absl::InvalidArgumentError(
        "loss \"LinearCrossEntropyLoss\": out_features (K-dimensional logits) is not supported; "
        "reshape the input to (N, in_features)");
  }
  return std::unique_ptr<Loss>(std::make_unique<LinearCrossEntropy>(kwargs));
}

KwargSpec Margin(double default_value) {
  return {.name = "margin",
          .type = KwargType::kNumber,
          .doc = "the margin",
          .default_value = default_value};
}

KwargSpec Flag(const char* name, const char* doc, bool default_value) {
  return {.name = name, .type = KwargType::kBool, .doc = doc, .default_value = default_value};
}

KD_REGISTER(LossRegistry(), "BCELoss", MakeBce, {kReduction, ClassWeightSpec()});
KD_REGISTER(LossRegistry(), "NLLLoss", MakeNll, {kReduction, ClassWeightSpec(), IgnoreIndexSpec()});
KD_REGISTER(LossRegistry(), "NLLLoss2d", MakeNll,
            {kReduction, ClassWeightSpec(), IgnoreIndexSpec()});
KD_REGISTER(LossRegistry(), "HuberLoss",
            ElementwiseWith("HuberLoss", "delta",
                            [](const at::Tensor& a, const at::Tensor& b, double delta,
                               int64_t reduction) {
                              return at::huber_loss(a, b, reduction, delta);
                            }),
            {kReduction, PositiveNumberSpec("delta", "L1/L2 switch", 1.0)});
KD_REGISTER(LossRegistry(), "SoftMarginLoss", Elementwise<at::soft_margin_loss>("SoftMarginLoss"),
            {kReduction});
KD_REGISTER(LossRegistry(), "MultiLabelSoftMarginLoss", MakeMultiLabelSoftMargin,
            {kReduction, ClassWeightSpec()});
KD_REGISTER(LossRegistry(), "MultiLabelMarginLoss", MakeMultiLabelMargin, {kReduction});
KD_REGISTER(LossRegistry(), "MultiMarginLoss", MakeMultiMargin,
            {kReduction,
             ClassWeightSpec(),
             Margin(1.0),
             {.name = "p",
              .type = KwargType::kInteger,
              .doc = "1 or 2",
              .default_value = 1,
              .min = 1,
              .max = 2}});
KD_REGISTER(LossRegistry(), "TripletMarginLoss", MakeTripletMargin,
            {kReduction, Margin(1.0), PositiveNumberSpec("p", "the norm's degree", 2.0),
             NonNegativeNumberSpec("eps", "guards the norm", 1e-6),
             Flag("swap", "the distance swap of Balntas et al.", false)});
KD_REGISTER(LossRegistry(), "TripletMarginWithDistanceLoss", MakeTripletMarginWithDistance,
            {kReduction, Margin(1.0), Flag("swap", "the distance swap of Balntas et al.", false)});
KD_REGISTER(LossRegistry(), "MarginRankingLoss", MakeMarginRanking, {kReduction, Margin(0.0)});
KD_REGISTER(LossRegistry(), "HingeEmbeddingLoss",
            ElementwiseWith("HingeEmbeddingLoss", "margin", at::hinge_embedding_loss),
            {kReduction, Margin(1.0)});
KD_REGISTER(LossRegistry(), "PoissonNLLLoss", MakePoissonNll,
            {kReduction, Flag("log_input", "input is the log of the rate", true),
             Flag("full", "adds Stirling's term", false),
             PositiveNumberSpec("eps", "guards log(input) when log_input is false", 1e-8)});
KD_REGISTER(LossRegistry(), "GaussianNLLLoss", MakeGaussianNll,
            {kReduction, Flag("full", "adds the constant 0.5 log(2 pi)", false),
             PositiveNumberSpec("eps", "the variances' floor", 1e-6)});
KD_REGISTER(LossRegistry(), "LinearCrossEntropyLoss", MakeLinearCrossEntropy,
            {{.name = "in_features",
              .type = KwargType::kInteger,
              .doc = "the input's last dimension",
              .min = 1,
              .required = true},
             {.name = "num_classes",
              .type = KwargType::kInteger,
              .doc = "the logits' classes",
              .min = 1,
              .required = true},
             Flag("bias", "a learnable bias on the logits", false),
             kReduction,
             ClassWeightSpec(),
             IgnoreIndexSpec(),
             LabelSmoothingSpec(),
             {.name = "out_features",
              .type = KwargType::kIntegerList,
              .doc = "K-dimensional logits' dimensions; only () is supported",
              .default_value = std::vector<int64_t>{}}});
KD_REGISTER(LossRegistry(), "CTCLoss", MakeCtc,
            {kReduction,
             {.name = "blank",
              .type = KwargType::kInteger,
              .doc = "the blank label",
              .default_value = 0,
              .min = 0},
             Flag("zero_infinity", "infinite losses (impossible alignments) become 0", false)});

}  // namespace
}  // namespace kd
