// silverspoon-kd's 14 losses under its keys and aliases (silverspoon_kd/losses/registry.py),
// reading "student" and "teacher": mse, normalized_mse, cosine, smooth_l1, kl_divergence
// (kl_div), jsd, logit_lens_kl, contrastive, angular_magnitude, mahalanobis_mse (mahal_mse),
// mahalanobis_cosine (mahal_cosine), relkd_distance, relkd_angle, relkd_distance_angle
// (relkd_da).
// The divergences work on the last dimension, every other dimension flattened into tokens, in
// float32, averaged per token and scaled by T^2, as silverspoon-kd computes them. Their
// chunk_size (0 < chunk_size < tokens) computes them that many tokens at a time, keeping no
// softmax for the backward (losses/internal/chunked_divergence.h): the same values, less memory.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "absl/strings/str_cat.h"
#include "base/ivalue_util.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "distill/losses/internal/chunked_divergence.h"
#include "distill/losses/loss.h"

namespace kd {
namespace {

using PairFn = std::function<at::Tensor(const at::Tensor& student, const at::Tensor& teacher)>;

LossFactory Factory(std::string key, std::function<PairFn(const Kwargs&)> make_fn,
                    PairShape shape = PairShape::kSame) {
  return [key = std::move(key), make_fn = std::move(make_fn),
          shape](const Kwargs& kwargs) -> absl::StatusOr<std::unique_ptr<Loss>> {
    return MakeStudentTeacherLoss(key, shape, make_fn(kwargs));
  };
}

// (tokens, vocabulary) views in float32.
std::pair<at::Tensor, at::Tensor> Tokens(const at::Tensor& s, const at::Tensor& t) {
  return {s.reshape({-1, s.size(-1)}).to(at::kFloat), t.reshape({-1, t.size(-1)}).to(at::kFloat)};
}

// silverspoon-kd's rule: chunk when 0 < chunk_size < the number of tokens.
bool Chunked(int64_t chunk, const at::Tensor& x) {
  return chunk > 0 && x.dim() >= 1 && chunk < x.numel() / std::max<int64_t>(1, x.size(-1));
}

PairFn Mse(const Kwargs& kwargs) {
  const int64_t reduction = ReductionKwarg(kwargs);
  return [reduction](const at::Tensor& s, const at::Tensor& t) {
    return at::mse_loss(s, t, reduction);
  };
}

PairFn NormalizedMse(const Kwargs& kwargs) {
  const double eps = NumberKwarg(kwargs, "eps");
  return [eps](const at::Tensor& s, const at::Tensor& t) {
    return at::mse_loss(Standardize(s, eps), Standardize(t, eps));
  };
}

PairFn Cosine(const Kwargs& kwargs) {
  const int64_t dim = IntKwarg(kwargs, "dim");
  return [dim](const at::Tensor& s, const at::Tensor& t) {
    return 1 - at::cosine_similarity(s, t, dim).mean();
  };
}

PairFn SmoothL1(const Kwargs& kwargs) {
  const int64_t reduction = ReductionKwarg(kwargs);
  const double beta = NumberKwarg(kwargs, "beta");
  return [reduction, beta](const at::Tensor& s, const at::Tensor& t) {
    return at::smooth_l1_loss(s, t, reduction, beta);
  };
}

PairFn KlDivergence(const Kwargs& kwargs) {
  const double temp = NumberKwarg(kwargs, "temperature");
  const int64_t chunk = IntKwarg(kwargs, "chunk_size");
  return [temp, chunk](const at::Tensor& student, const at::Tensor& teacher) {
    if (Chunked(chunk, student)) {
      return losses_internal::ChunkedKlDivergence(student, teacher, temp, chunk);
    }
    const auto [s, t] = Tokens(student, teacher);
    const at::Tensor kl =
        at::kl_div(at::log_softmax(s / temp, -1), at::softmax(t / temp, -1), at::Reduction::Sum) /
        s.size(0);
    return kl * (temp * temp);
  };
}

// JSD_beta(P_t || P_s) = beta KL(P_t || M) + (1 - beta) KL(P_s || M), M = beta P_t +
// (1 - beta) P_s, per token, times T^2.
PairFn Jsd(const Kwargs& kwargs) {
  const double temp = NumberKwarg(kwargs, "temperature");
  const double beta = NumberKwarg(kwargs, "beta");
  const int64_t chunk = IntKwarg(kwargs, "chunk_size");
  return [temp, beta, chunk](const at::Tensor& student, const at::Tensor& teacher) {
    if (Chunked(chunk, student)) {
      return losses_internal::ChunkedJsd(student, teacher, temp, beta, chunk);
    }
    const auto [s, t] = Tokens(student, teacher);
    const at::Tensor s_log = at::log_softmax(s / temp, -1), t_log = at::log_softmax(t / temp, -1);
    const at::Tensor log_m = at::logaddexp(t_log + std::log(beta), s_log + std::log(1 - beta));
    const at::Tensor kl_t = at::kl_div(log_m, t_log.exp(), at::Reduction::Sum);
    const at::Tensor kl_s = at::kl_div(log_m, s_log.exp(), at::Reduction::Sum);
    return (beta * kl_t + (1 - beta) * kl_s) / s.size(0) * (temp * temp);
  };
}

// Logit lens (after Gong et al., ACL 2025, FDD): both hidden states (..., D) through one output
// head, then KL(teacher || student) of the token distributions, batch-mean over dimension 0,
// times T^2; the teacher's side without gradients. silverspoon-kd takes the head as a module;
// libkd reads it as a linear layer's inputs "head_weight" (V, D) and optional "head_bias" (V)
// (an LM head or a classifier; a config points them at the model's parameters, io: PARAMETER).
absl::StatusOr<std::unique_ptr<Loss>> MakeLogitLensKl(const Kwargs& kwargs) {
  const double temp = NumberKwarg(kwargs, "temperature");
  return MakeFunctionLoss([temp](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    constexpr absl::string_view kKey = "logit_lens_kl";
    KD_ASSIGN_OR_RETURN(at::Tensor student, in.Get(kKey, "student"));
    KD_ASSIGN_OR_RETURN(at::Tensor teacher, in.Get(kKey, "teacher"));
    KD_ASSIGN_OR_RETURN(at::Tensor weight, in.Get(kKey, "head_weight"));
    const at::Tensor bias = in.GetOptional("head_bias");
    KD_RETURN_IF_ERROR(SameShape(kKey, student, teacher));
    if (student.dim() < 1 || weight.dim() != 2 || weight.size(1) != student.size(-1) ||
        (bias.defined() && (bias.dim() != 1 || bias.size(0) != weight.size(0)))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "loss \"logit_lens_kl\": the head maps (..., D) by head_weight (V, D) and head_bias "
          "(V), got hidden states ",
          ShapeString(student), ", head_weight ", ShapeString(weight),
          bias.defined() ? absl::StrCat(", head_bias ", ShapeString(bias)) : ""));
    }
    at::Tensor teacher_logits;
    {
      at::NoGradGuard no_grad;
      teacher_logits = at::linear(teacher, weight, bias);
    }
    const at::Tensor student_logits = at::linear(student, weight, bias);
    const at::Tensor kl =
        at::kl_div(at::log_softmax(student_logits.to(at::kFloat) / temp, -1),
                   at::softmax(teacher_logits.to(at::kFloat) / temp, -1), at::Reduction::Sum);
    return kl / student_logits.size(0) * (temp * temp);
  });
}

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
          if (weight_.defined()) s = at::linear(s, weight_.to(s.device()), bias_.to(s.device()));
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

// Direction and scale apart: alpha (1 - mean cos(s, t)) + beta MSE(|s|, |t|) along `dim`.
PairFn AngularMagnitude(const Kwargs& kwargs) {
  const double alpha = NumberKwarg(kwargs, "alpha");
  const double beta = NumberKwarg(kwargs, "beta");
  const int64_t dim = IntKwarg(kwargs, "dim");
  return [=](const at::Tensor& s, const at::Tensor& t) {
    const at::Tensor angular = 1 - at::cosine_similarity(s, t, dim).mean();
    return alpha * angular + beta * at::mse_loss(s.norm(2, {dim}), t.norm(2, {dim}));
  };
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

// Relational KD as silverspoon-kd computes it (Park et al. 2019): smooth L1 between the
// student's and the teacher's batch relations, (B, ...) flattened to (B, D), the teacher's
// without gradients. Distances: torch.cdist divided by the mean positive distance (+1e-8);
// angles: the cosines at every pivot. A batch of one has no relations: the loss is 0.
at::Tensor Flat(const at::Tensor& x) { return x.dim() > 2 ? x.reshape({x.size(0), -1}) : x; }

at::Tensor MeanNormalized(const at::Tensor& distances) {
  const at::Tensor positive = distances.masked_select(distances > 0);
  if (positive.numel() == 0) return distances;
  return distances / (positive.mean() + 1e-8);
}

at::Tensor RelationLoss(const at::Tensor& s, const at::Tensor& t,
                        at::Tensor (*relation)(const at::Tensor&)) {
  at::Tensor teacher;
  {
    at::NoGradGuard no_grad;
    teacher = relation(Flat(t));
  }
  return at::smooth_l1_loss(relation(Flat(s)), teacher);
}

at::Tensor Distances(const at::Tensor& x) { return MeanNormalized(at::cdist(x, x)); }

PairFn RelKdDistance(const Kwargs&) {
  return [](const at::Tensor& s, const at::Tensor& t) { return RelationLoss(s, t, Distances); };
}
PairFn RelKdAngle(const Kwargs&) {
  return [](const at::Tensor& s, const at::Tensor& t) { return RelationLoss(s, t, PivotAngles); };
}
PairFn RelKdDistanceAngle(const Kwargs& kwargs) {
  const double dist_weight = NumberKwarg(kwargs, "dist_weight");
  const double angle_weight = NumberKwarg(kwargs, "angle_weight");
  return [=](const at::Tensor& s, const at::Tensor& t) {
    return dist_weight * RelationLoss(s, t, Distances) +
           angle_weight * RelationLoss(s, t, PivotAngles);
  };
}

const KwargSpec kReduction = ReductionKwargSpec();
const KwargSpec kTemperature = PositiveNumberSpec("temperature", "softening T", 1.0);
const KwargSpec kChunkSize = {.name = "chunk_size",
                              .type = KwargType::kInteger,
                              .doc = "tokens computed at a time (less memory, same value); 0: all",
                              .default_value = 0,
                              .min = 0};

KD_REGISTER(LossRegistry(), "mse", Factory("mse", Mse), {kReduction});
KD_REGISTER(LossRegistry(), "normalized_mse", Factory("normalized_mse", NormalizedMse),
            {NonNegativeNumberSpec("eps", "std's guard", 1e-5)});
KD_REGISTER(LossRegistry(), "cosine", Factory("cosine", Cosine),
            {{.name = "dim",
              .type = KwargType::kInteger,
              .doc = "the dimension compared",
              .default_value = -1}});
KD_REGISTER(LossRegistry(), "smooth_l1", Factory("smooth_l1", SmoothL1),
            {kReduction, NonNegativeNumberSpec("beta", "L1/L2 switch", 1.0)});
KD_REGISTER(LossRegistry(), "kl_divergence", Factory("kl_divergence", KlDivergence),
            {kTemperature, kChunkSize});
KD_REGISTER(LossRegistry(), "kl_div", Factory("kl_div", KlDivergence), {kTemperature, kChunkSize});
KD_REGISTER(LossRegistry(), "logit_lens_kl", MakeLogitLensKl, {kTemperature});
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
KD_REGISTER(LossRegistry(), "angular_magnitude", Factory("angular_magnitude", AngularMagnitude),
            {NonNegativeNumberSpec("alpha", "angular weight", 1.0),
             NonNegativeNumberSpec("beta", "magnitude weight", 1.0),
             {.name = "dim",
              .type = KwargType::kInteger,
              .doc = "the feature dimension",
              .default_value = -1}});
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
KD_REGISTER(LossRegistry(), "relkd_distance",
            Factory("relkd_distance", RelKdDistance, PairShape::kSameBatch), {});
KD_REGISTER(LossRegistry(), "relkd_angle",
            Factory("relkd_angle", RelKdAngle, PairShape::kSameBatch), {});
const std::vector<KwargSpec> kRelKdDa = {
    NonNegativeNumberSpec("dist_weight", "distance weight", 1.0),
    NonNegativeNumberSpec("angle_weight", "angle weight", 2.0)};
KD_REGISTER(LossRegistry(), "relkd_distance_angle",
            Factory("relkd_distance_angle", RelKdDistanceAngle, PairShape::kSameBatch), kRelKdDa);
KD_REGISTER(LossRegistry(), "relkd_da",
            Factory("relkd_da", RelKdDistanceAngle, PairShape::kSameBatch), kRelKdDa);
KD_REGISTER(LossRegistry(), "jsd", Factory("jsd", Jsd),
            {kTemperature, kChunkSize, JsdBetaKwargSpec()});

}  // namespace
}  // namespace kd
