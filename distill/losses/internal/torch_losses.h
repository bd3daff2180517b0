// Internal to distill/losses: what torch.nn's losses share in libkd (standard_losses.cc,
// torch_nn_losses.cc): the compared pair of an elementwise loss, the per-class `weight` kwarg.
#ifndef LIBKD_DISTILL_LOSSES_INTERNAL_TORCH_LOSSES_H_
#define LIBKD_DISTILL_LOSSES_INTERNAL_TORCH_LOSSES_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "distill/losses/loss.h"

namespace kd {
namespace losses_internal {

// The two tensors an elementwise loss compares: torch's names ("input", "target") or a
// distillation config's ("student", "teacher"), checked to have one shape.
inline absl::StatusOr<std::pair<at::Tensor, at::Tensor>> Compared(absl::string_view loss,
                                                                  const LossInputs& in) {
  const bool torch_names = in.GetOptional("input").defined();
  const char* first = torch_names ? "input" : "student";
  const char* second = torch_names ? "target" : "teacher";
  KD_ASSIGN_OR_RETURN(at::Tensor a, in.Get(loss, first));
  KD_ASSIGN_OR_RETURN(at::Tensor b, in.Get(loss, second));
  KD_RETURN_IF_ERROR(SameShape(loss, a, b, first, second));
  return std::make_pair(a, b);
}

inline absl::StatusOr<std::unique_ptr<Loss>> Make(LossFn fn) {
  return MakeFunctionLoss(std::move(fn));
}

// (input, target) losses with a reduction: MSELoss, L1Loss, SoftMarginLoss.
template <at::Tensor (*Op)(const at::Tensor&, const at::Tensor&, int64_t)>
LossFactory Elementwise(std::string key) {
  return [key](const Kwargs& kwargs) {
    const int64_t reduction = ReductionKwarg(kwargs);
    return Make([key, reduction](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
      KD_ASSIGN_OR_RETURN(auto compared, Compared(key, in));
      return Op(compared.first, compared.second, reduction);
    });
  };
}

// (input, target) losses with a reduction and one number kwarg, `number`: `op(input, target,
// number, reduction)`.
inline LossFactory ElementwiseWith(std::string key, std::string number,
                                   at::Tensor (*op)(const at::Tensor&, const at::Tensor&, double,
                                                    int64_t)) {
  return [key, number, op](const Kwargs& kwargs) {
    const int64_t reduction = ReductionKwarg(kwargs);
    const double value = NumberKwarg(kwargs, number);
    return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
      KD_ASSIGN_OR_RETURN(auto compared, Compared(key, in));
      return op(compared.first, compared.second, value, reduction);
    });
  };
}

// torch's "ignore_index" and "label_smoothing" of its cross-entropy losses.
inline KwargSpec IgnoreIndexSpec() {
  return {.name = "ignore_index",
          .type = KwargType::kInteger,
          .doc = "target to skip",
          .default_value = -100};
}
inline KwargSpec LabelSmoothingSpec() {
  return {.name = "label_smoothing",
          .type = KwargType::kNumber,
          .doc = "0 to 1",
          .default_value = 0.0,
          .min = 0,
          .max = 1};
}

// torch.nn's `weight` of a classification loss: a weight per class (or per element, as the
// loss says); unset: every one 1.
inline KwargSpec ClassWeightSpec() {
  return {
      .name = "weight", .type = KwargType::kNumberList, .doc = "a weight per class; unset: 1 each"};
}

// The `weight` kwarg, if given.
inline std::optional<std::vector<double>> ClassWeightKwarg(const Kwargs& kwargs) {
  if (FindKwarg(kwargs, "weight") == nullptr) return std::nullopt;
  return NumberListKwarg(kwargs, "weight");
}

// `weight` as a tensor of `like`'s dtype and device; undefined if unset.
inline at::Tensor ClassWeight(const std::optional<std::vector<double>>& weight,
                              const at::Tensor& like) {
  if (!weight.has_value()) return at::Tensor();
  return at::tensor(*weight, at::TensorOptions().dtype(at::kDouble))
      .to(like.device(), like.scalar_type());
}

// torch.nn.CrossEntropyLoss's computation with its kwargs read from `kwargs` (weight,
// ignore_index, label_smoothing) and the reduction given: CrossEntropyLoss and the hard-label
// term of KDLoss, which hands its extra kwargs to a CrossEntropyLoss as torchdistill's does.
struct CrossEntropy {
  explicit CrossEntropy(const Kwargs& kwargs, int64_t reduction)
      : weight(ClassWeightKwarg(kwargs)),
        reduction(reduction),
        ignore_index(IntKwarg(kwargs, "ignore_index")),
        smoothing(NumberKwarg(kwargs, "label_smoothing")) {}
  at::Tensor operator()(const at::Tensor& input, const at::Tensor& target) const {
    return at::cross_entropy_loss(input, target, ClassWeight(weight, input), reduction,
                                  ignore_index, smoothing);
  }
  std::optional<std::vector<double>> weight;
  int64_t reduction;
  int64_t ignore_index;
  double smoothing;
};

// torch.nn.KLDivLoss: input holds log-probabilities; "batchmean" divides the sum by the batch
// size (the mathematically correct KL per sample).
inline at::Tensor KlDiv(const at::Tensor& log_input, const at::Tensor& target,
                        const std::string& reduction, bool log_target) {
  if (reduction == "batchmean") {
    return at::kl_div(log_input, target, at::Reduction::Sum, log_target) / log_input.size(0);
  }
  return at::kl_div(log_input, target, ReductionEnum(reduction), log_target);
}

}  // namespace losses_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_LOSSES_INTERNAL_TORCH_LOSSES_H_
