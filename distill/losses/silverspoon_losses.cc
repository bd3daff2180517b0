// silverspoon-kd's losses under its keys (silverspoon_kd/losses/registry.py), reading "student"
// and "teacher": mse, normalized_mse, cosine, smooth_l1, kl_divergence (alias kl_div), jsd.
// The divergences work on the last dimension, every other dimension flattened into tokens, in
// float32, averaged per token and scaled by T^2, as silverspoon-kd computes them (its
// chunk_size only bounds memory: the value is the same, so libkd accepts and ignores it).
#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "base/ivalue_util.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "distill/losses/loss.h"

namespace kd {
namespace {

using PairFn = std::function<at::Tensor(const at::Tensor& student, const at::Tensor& teacher)>;

LossFactory Factory(std::string key, std::function<PairFn(const Kwargs&)> make_fn) {
  return [key = std::move(key), make_fn = std::move(make_fn)](const Kwargs& kwargs)
             -> absl::StatusOr<std::unique_ptr<Loss>> {
    return MakeStudentTeacherLoss(key, PairShape::kSame, make_fn(kwargs));
  };
}

// (tokens, vocabulary) views in float32.
std::pair<at::Tensor, at::Tensor> Tokens(const at::Tensor& s, const at::Tensor& t) {
  return {s.reshape({-1, s.size(-1)}).to(at::kFloat), t.reshape({-1, t.size(-1)}).to(at::kFloat)};
}

PairFn Mse(const Kwargs& kwargs) {
  const int64_t reduction = ReductionKwarg(kwargs);
  return [reduction](const at::Tensor& s, const at::Tensor& t) {
    return at::mse_loss(s, t, reduction);
  };
}

PairFn NormalizedMse(const Kwargs& kwargs) {
  const double eps = NumberKwarg(kwargs, "eps", 1e-5);
  return [eps](const at::Tensor& s, const at::Tensor& t) {
    return at::mse_loss(Standardize(s, eps), Standardize(t, eps));
  };
}

PairFn Cosine(const Kwargs& kwargs) {
  const int64_t dim = static_cast<int64_t>(NumberKwarg(kwargs, "dim", -1));
  return [dim](const at::Tensor& s, const at::Tensor& t) {
    return 1 - at::cosine_similarity(s, t, dim).mean();
  };
}

PairFn SmoothL1(const Kwargs& kwargs) {
  const int64_t reduction = ReductionKwarg(kwargs);
  const double beta = NumberKwarg(kwargs, "beta", 1.0);
  return [reduction, beta](const at::Tensor& s, const at::Tensor& t) {
    return at::smooth_l1_loss(s, t, reduction, beta);
  };
}

PairFn KlDivergence(const Kwargs& kwargs) {
  const double temp = NumberKwarg(kwargs, "temperature", 1.0);
  return [temp](const at::Tensor& student, const at::Tensor& teacher) {
    const auto [s, t] = Tokens(student, teacher);
    const at::Tensor kl = at::kl_div(at::log_softmax(s / temp, -1), at::softmax(t / temp, -1),
                                     at::Reduction::Sum) / s.size(0);
    return kl * (temp * temp);
  };
}

// JSD_beta(P_t || P_s) = beta KL(P_t || M) + (1 - beta) KL(P_s || M), M = beta P_t +
// (1 - beta) P_s, per token, times T^2.
PairFn Jsd(const Kwargs& kwargs) {
  const double temp = NumberKwarg(kwargs, "temperature", 1.0);
  const double beta = NumberKwarg(kwargs, "beta", 0.5);
  return [temp, beta](const at::Tensor& student, const at::Tensor& teacher) {
    const auto [s, t] = Tokens(student, teacher);
    const at::Tensor s_log = at::log_softmax(s / temp, -1), t_log = at::log_softmax(t / temp, -1);
    const at::Tensor log_m = at::logaddexp(t_log + std::log(beta), s_log + std::log(1 - beta));
    const at::Tensor kl_t = at::kl_div(log_m, t_log.exp(), at::Reduction::Sum);
    const at::Tensor kl_s = at::kl_div(log_m, s_log.exp(), at::Reduction::Sum);
    return (beta * kl_t + (1 - beta) * kl_s) / s.size(0) * (temp * temp);
  };
}

const KwargSpec kReduction = ReductionKwargSpec();
const KwargSpec kTemperature = {.name = "temperature", .type = KwargType::kNumber,
                                .doc = "softening T; 1", .min = 0, .min_exclusive = true};
const KwargSpec kChunkSize = {.name = "chunk_size", .type = KwargType::kInteger,
                              .doc = "silverspoon-kd's memory bound; same value", .min = 0};

KD_REGISTER(LossRegistry(), "mse", Factory("mse", Mse), {kReduction});
KD_REGISTER(LossRegistry(), "normalized_mse", Factory("normalized_mse", NormalizedMse),
            {{.name = "eps", .type = KwargType::kNumber, .doc = "1e-5", .min = 0}});
KD_REGISTER(LossRegistry(), "cosine", Factory("cosine", Cosine),
            {{.name = "dim", .type = KwargType::kInteger, .doc = "-1"}});
KD_REGISTER(LossRegistry(), "smooth_l1", Factory("smooth_l1", SmoothL1),
            {kReduction, {.name = "beta", .type = KwargType::kNumber, .doc = "1", .min = 0}});
KD_REGISTER(LossRegistry(), "kl_divergence", Factory("kl_divergence", KlDivergence),
            {kTemperature, kChunkSize});
KD_REGISTER(LossRegistry(), "kl_div", Factory("kl_div", KlDivergence),
            {kTemperature, kChunkSize});
KD_REGISTER(LossRegistry(), "jsd", Factory("jsd", Jsd),
            {kTemperature, kChunkSize,
             {.name = "beta", .type = KwargType::kNumber,
              .doc = "teacher weight in the mixture, strictly between 0 and 1; 0.5", .min = 0,
              .max = 1, .min_exclusive = true, .max_exclusive = true}});

}  // namespace
}  // namespace kd
