// silverspoon-kd's losses that own state: contrastive (InfoNCE with the student's projector,
// made up front or on the first call) and the Mahalanobis pair (mahalanobis_mse / mahal_mse,
// mahalanobis_cosine / mahal_cosine, with the metric of an output projection cached until it
// changes). The stateless ones are in silverspoon_losses.cc.
#include <memory>
#include <string>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "absl/strings/str_cat.h"
#include "base/ivalue_util.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "distill/losses/loss.h"

namespace kd {
namespace {

// InfoNCE between the batch's students and teachers (rows of (N, D) or (..., D) flattened):
// cross-entropy of the cosine similarities / T with the matching teacher as the class. When the
// dimensions differ, a linear projector the loss owns maps the student to the teacher's; it is
// made at construction when student_dim and teacher_dim are given (give them, so the optimizer
// sees it from the start), else on the first call, as silverspoon-kd does.
class ContrastiveLoss final : public Loss {
 public:
  ContrastiveLoss(double temperature, int64_t student_dim, int64_t teacher_dim)
      : temperature_(temperature), student_dim_(student_dim), teacher_dim_(teacher_dim) {
    if (student_dim > 0 && teacher_dim > 0) Initialize(student_dim, teacher_dim, {});
  }

  absl::StatusOr<at::Tensor> Forward(const LossInputs& inputs) override {
    KD_ASSIGN_OR_RETURN(at::Tensor student, inputs.Get("contrastive", "student"));
    KD_ASSIGN_OR_RETURN(at::Tensor teacher, inputs.Get("contrastive", "teacher"));
    if (student.dim() > 2) {
      student = student.reshape({-1, student.size(-1)});
      teacher = teacher.reshape({-1, teacher.size(-1)});
    }
    if (student.dim() != 2 || teacher.dim() != 2 || student.size(0) != teacher.size(0) ||
        (student_dim_ > 0 && student.size(1) != student_dim_) ||
        (teacher_dim_ > 0 && teacher.size(1) != teacher_dim_)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "loss \"contrastive\": needs as many student rows as teacher rows",
          student_dim_ > 0 ? absl::StrCat(", of ", student_dim_, " and ", teacher_dim_,
                                          " features (student_dim, teacher_dim)")
                           : "",
          "; got student ", ShapeString(student), " and teacher ", ShapeString(teacher)));
    }
    if (!initialized_) Initialize(student.size(1), teacher.size(1), student.options());
    return CallTorch(
        [&] {
          at::Tensor s = student;
          // The projector in the inputs' type: a float64 model's loss computes in float64.
          if (weight_.defined()) {
            s = at::linear(s, weight_.to(s.device(), s.scalar_type()),
                           bias_.to(s.device(), s.scalar_type()));
          }
          const at::Tensor logits =
              at::matmul(L2Normalize(s, 1), L2Normalize(teacher, 1).t()) / temperature_;
          return at::cross_entropy_loss(
              logits, at::arange(logits.size(0), logits.options().dtype(at::kLong)));
        },
        absl::StatusCode::kInvalidArgument);
  }

  std::vector<at::Tensor> Parameters() const override {
    if (!weight_.defined()) return {};
    return {weight_, bias_};
  }
  std::vector<std::pair<std::string, at::Tensor>> NamedState() const override {
    if (!weight_.defined()) return {};
    return {{"projector.weight", weight_}, {"projector.bias", bias_}};
  }

 private:
  void Initialize(int64_t student_dim, int64_t teacher_dim, const at::TensorOptions& options) {
    if (student_dim != teacher_dim) {
      std::tie(weight_, bias_) = NewLinear(student_dim, teacher_dim, options);
    }
    initialized_ = true;
  }

  double temperature_;
  int64_t student_dim_, teacher_dim_;  // 0: inferred
  bool initialized_ = false;
  at::Tensor weight_, bias_;
};

absl::StatusOr<std::unique_ptr<Loss>> MakeContrastive(const Kwargs& kwargs) {
  // Unset dimensions (0) are inferred from the first batch.
  const int64_t student_dim =
      FindKwarg(kwargs, "student_dim") ? IntKwarg(kwargs, "student_dim") : 0;
  const int64_t teacher_dim =
      FindKwarg(kwargs, "teacher_dim") ? IntKwarg(kwargs, "teacher_dim") : 0;
  return std::unique_ptr<Loss>(std::make_unique<ContrastiveLoss>(NumberKwarg(kwargs, "temperature"),
                                                                 student_dim, teacher_dim));
}

// Hidden states compared under the metric M = W^T W of an output projection W (V, D): the
// quadratic form (s - t)^T M (s - t) ("mse"), or 1 - cos_M(s, t) ("cosine"), averaged over
// positions; logit-space distances at O(D^2). M comes from the input "weight_matrix" (V, D),
// computed in float32 and cached until W changes (its version counter), or "metric_matrix"
// (D, D) as is; both without gradients, as in silverspoon-kd. Its pre_norm module is a
// reference to the norm's output in a config (the student's final norm output is pre_norm(s)).
class MahalanobisLoss final : public Loss {
 public:
  MahalanobisLoss(std::string key, bool cosine, double eps)
      : key_(std::move(key)), cosine_(cosine), eps_(eps) {}

  absl::StatusOr<at::Tensor> Forward(const LossInputs& inputs) override {
    KD_ASSIGN_OR_RETURN(at::Tensor s, inputs.Get(key_, "student"));
    KD_ASSIGN_OR_RETURN(at::Tensor t, inputs.Get(key_, "teacher"));
    KD_RETURN_IF_ERROR(SameShape(key_, s, t));
    KD_ASSIGN_OR_RETURN(at::Tensor metric, Metric(inputs));
    if (s.dim() < 1 || s.size(-1) != metric.size(0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "loss \"", key_, "\": the metric is ", ShapeString(metric), " but the hidden states are ",
          ShapeString(s), " (their last dimension must match)"));
    }
    return CallTorch(
        [&] {
          const at::Tensor m = metric.to(s.device(), s.scalar_type());
          if (!cosine_) {
            const at::Tensor diff = s - t;
            return (at::matmul(diff, m) * diff).sum(-1).mean();
          }
          const at::Tensor sm = at::matmul(s, m), tm = at::matmul(t, m);
          const at::Tensor smt = (sm * t).sum(-1), sms = (sm * s).sum(-1), tmt = (tm * t).sum(-1);
          return (1.0 - smt / (sms.sqrt() * tmt.sqrt()).clamp_min(eps_)).mean();
        },
        absl::StatusCode::kInvalidArgument);
  }

 private:
  absl::StatusOr<at::Tensor> Metric(const LossInputs& inputs) {
    const at::Tensor weight = inputs.GetOptional("weight_matrix");
    const at::Tensor metric = inputs.GetOptional("metric_matrix");
    if (weight.defined() == metric.defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat("loss \"", key_,
                       "\" needs exactly one of the inputs \"weight_matrix\" (V, D) and "
                       "\"metric_matrix\" (D, D); ",
                       weight.defined() ? "both" : "neither", " given"));
    }
    if (metric.defined()) {
      if (metric.dim() != 2 || metric.size(0) != metric.size(1)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "loss \"", key_, "\": metric_matrix must be (D, D), got ", ShapeString(metric)));
      }
      return metric.detach();
    }
    if (weight.dim() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "loss \"", key_, "\": weight_matrix must be (V, D), got ", ShapeString(weight)));
    }
    if (weight.unsafeGetTensorImpl() != cached_from_ || weight._version() != cached_version_ ||
        !cached_.defined()) {
      at::NoGradGuard no_grad;
      const at::Tensor w = weight.detach().to(at::kFloat);
      cached_ = at::matmul(w.t(), w).to(weight.scalar_type());
      cached_from_ = weight.unsafeGetTensorImpl();
      cached_version_ = weight._version();
    }
    return cached_;
  }

  std::string key_;
  bool cosine_;
  double eps_;
  at::Tensor cached_;  // W^T W of the last weight_matrix
  const c10::TensorImpl* cached_from_ = nullptr;
  int64_t cached_version_ = -1;
};

LossFactory MahalanobisFactory(std::string key, bool cosine) {
  return [key = std::move(key),
          cosine](const Kwargs& kwargs) -> absl::StatusOr<std::unique_ptr<Loss>> {
    return std::unique_ptr<Loss>(
        std::make_unique<MahalanobisLoss>(key, cosine, cosine ? NumberKwarg(kwargs, "eps") : 0.0));
  };
}

KD_REGISTER(
    LossRegistry(), "contrastive", MakeContrastive,
    {PositiveNumberSpec("temperature", "softening T", 0.07),
     {.name = "student_dim",
      .type = KwargType::kInteger,
      .doc = "student features; with teacher_dim, the projector is made up front",
      .min = 1},
     {.name = "teacher_dim", .type = KwargType::kInteger, .doc = "teacher features", .min = 1}},
    [](const KwargsView& view) {
      if (view.kwargs.count("student_dim") != view.kwargs.count("teacher_dim")) {
        return absl::InvalidArgumentError("give student_dim and teacher_dim together, or neither");
      }
      return absl::OkStatus();
    });
const std::vector<KwargSpec> kMahalanobisMse = {};
const std::vector<KwargSpec> kMahalanobisCosine = {
    NonNegativeNumberSpec("eps", "denominator guard", 1e-8)};
KD_REGISTER(LossRegistry(), "mahalanobis_mse", MahalanobisFactory("mahalanobis_mse", false),
            kMahalanobisMse);
KD_REGISTER(LossRegistry(), "mahal_mse", MahalanobisFactory("mahal_mse", false), kMahalanobisMse);
KD_REGISTER(LossRegistry(), "mahalanobis_cosine", MahalanobisFactory("mahalanobis_cosine", true),
            kMahalanobisCosine);
KD_REGISTER(LossRegistry(), "mahal_cosine", MahalanobisFactory("mahal_cosine", true),
            kMahalanobisCosine);

}  // namespace
}  // namespace kd
