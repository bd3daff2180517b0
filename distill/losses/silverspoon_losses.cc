// silverspoon-kd's 14 losses under its keys and aliases (silverspoon_kd/losses/registry.py),
// reading "student" and "teacher". Here the stateless ones: mse, normalized_mse, cosine,
// smooth_l1, kl_divergence (kl_div), jsd, logit_lens_kl, angular_magnitude, relkd_distance,
// relkd_angle, relkd_distance_angle (relkd_da); contrastive and the Mahalanobis pair, which own
// state, are in silverspoon_state_losses.cc.
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
KD_REGISTER(LossRegistry(), "angular_magnitude", Factory("angular_magnitude", AngularMagnitude),
            {NonNegativeNumberSpec("alpha", "angular weight", 1.0),
             NonNegativeNumberSpec("beta", "magnitude weight", 1.0),
             {.name = "dim",
              .type = KwargType::kInteger,
              .doc = "the feature dimension",
              .default_value = -1}});
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
