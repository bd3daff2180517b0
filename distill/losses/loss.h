// Losses: the interface, the registry and how a config builds one.
//
//   // A loss registers itself under its config key, with its kwargs contract:
//   KD_REGISTER(kd::LossRegistry(), "KDLoss", kd::MakeKdLoss,
//               {{.name = "temperature", .type = kd::KwargType::kNumber, .min = 0,
//                 .min_exclusive = true, .required = true}, ...});
//
//   KD_ASSIGN_OR_RETURN(std::unique_ptr<kd::Loss> loss, kd::MakeLoss("KDLoss", kwargs));
//   KD_ASSIGN_OR_RETURN(at::Tensor value,
//                       loss->Forward({{"student", s_logits}, {"teacher", t_logits},
//                                      {"targets", labels}}));
//
// A loss reads named arguments ("student", "teacher", "targets", ...): a config's loss term
// fills them from I/O dict references (LossTermConfig.inputs). Losses that own parameters
// (a FitNet regressor) return them from Parameters(), so optimizers and checkpoints get them.
#ifndef LIBKD_DISTILL_LOSSES_LOSS_H_
#define LIBKD_DISTILL_LOSSES_LOSS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/ivalue_util.h"
#include "base/registry.h"

namespace kd {

// A loss's arguments by name.
class LossInputs {
 public:
  LossInputs(std::initializer_list<std::pair<const std::string, at::Tensor>> inputs)
      : inputs_(inputs) {}
  explicit LossInputs(const std::map<std::string, at::Tensor>& inputs)
      : inputs_(inputs.begin(), inputs.end()) {}
  explicit LossInputs(std::map<std::string, at::Tensor, std::less<>>&& inputs)
      : inputs_(std::move(inputs)) {}

  // The tensor `name`; InvalidArgument naming `loss`, the missing argument and the given ones.
  absl::StatusOr<at::Tensor> Get(absl::string_view loss, absl::string_view name) const;
  // The tensor `name`, or an undefined tensor if it was not given.
  at::Tensor GetOptional(absl::string_view name) const;

 private:
  std::map<std::string, at::Tensor, std::less<>> inputs_;
};

class Loss {
 public:
  virtual ~Loss() = default;
  // The loss value (a scalar unless the reduction is "none"), differentiable in its inputs.
  // InvalidArgument for missing arguments or shapes that do not fit, naming them.
  virtual absl::StatusOr<at::Tensor> Forward(const LossInputs& inputs) = 0;
  // Trainable parameters the loss owns (none by default).
  virtual std::vector<at::Tensor> Parameters() const { return {}; }
  // Every tensor the loss owns, by name: its parameters ("projector.weight") and its buffers (a
  // memory bank), for checkpoints to save and restore in place (none by default).
  virtual std::vector<std::pair<std::string, at::Tensor>> NamedState() const { return {}; }
};

// What a student/teacher loss requires of its two inputs.
enum class PairShape {
  kSame,       // equal shapes (elementwise comparisons, divergences)
  kSameBatch,  // equal sizes of dimension 0 (relations within a batch, feature maps)
};

// A loss computing fn(student, teacher) from the inputs "student" and "teacher": a missing
// input, shapes that break `shape` or a libtorch error give InvalidArgument naming `key` and
// both shapes.
std::unique_ptr<Loss> MakeStudentTeacherLoss(
    std::string key, PairShape shape,
    std::function<at::Tensor(const at::Tensor& student, const at::Tensor& teacher)> fn);

// A loss computed by `fn` from its inputs; a libtorch error it throws becomes InvalidArgument.
using LossFn = std::function<absl::StatusOr<at::Tensor>(const LossInputs& inputs)>;
std::unique_ptr<Loss> MakeFunctionLoss(LossFn fn);

// Builds a loss from its kwargs (checked against the registration's contract already).
using LossFactory = std::function<absl::StatusOr<std::unique_ptr<Loss>>(const Kwargs& kwargs)>;

// The losses by config key ("loss" registry kind).
Registry<LossFactory>& LossRegistry();

// The loss registered as `key` with `kwargs`: NotFound for an unknown key (naming the nearest
// and listing all), InvalidArgument for kwargs that break the loss's contract.
absl::StatusOr<std::unique_ptr<Loss>> MakeLoss(absl::string_view key, const Kwargs& kwargs);

// The "reduction" kwarg of torch's losses: mean (default), sum or none.
KwargSpec ReductionKwargSpec();
// A "reduction" over the batch of the given choices and default (torchdistill's losses:
// {"mean", "sum"}, or with "batchmean").
KwargSpec ReductionKwargSpec(std::vector<std::string> choices, std::string default_value);

// The "beta" of a generalized Jensen-Shannon divergence: the teacher's weight in the mixture,
// strictly between 0 and 1; 0.5 (the symmetric JSD).
KwargSpec JsdBetaKwargSpec();

// at::Reduction of "mean", "sum" or "none" (anything else: mean; contracts list the choices).
int64_t ReductionEnum(absl::string_view reduction);
// at::Reduction of the kwarg "reduction" (defaulted by the spec).
int64_t ReductionKwarg(const Kwargs& kwargs);

// (x - mean) / (eps + std) over the last dimension, std unbiased: silverspoon-kd's
// normalized_mse and torchdistill's logit standardization.
at::Tensor Standardize(const at::Tensor& x, double eps);

// F.normalize(x, p=2, dim): x / max(||x||_2, eps) along `dim`.
at::Tensor L2Normalize(const at::Tensor& x, int64_t dim, double eps = 1e-12);

// The cosines of the angles at every pivot of a batch of embeddings e (B, D): [k][i][j] =
// cos(e_i - e_k, e_j - e_k), shape (B, B, B); RKD's and RelKD's angle relation.
at::Tensor PivotAngles(const at::Tensor& e);

// A linear layer's (weight, bias) for `in` -> `out` features with torch.nn.Linear's default
// initialization (U(-1/sqrt(in), 1/sqrt(in)) for both), trainable, made with `options`.
std::pair<at::Tensor, at::Tensor> NewLinear(int64_t in, int64_t out,
                                            const at::TensorOptions& options = {});

// OK if `a` and `b` have one shape; else InvalidArgument 'loss "<loss>": <a_name> has shape
// [..] but <b_name> has [..]' (torch would broadcast with a warning; a distillation config with
// mismatched shapes is a mistake).
absl::Status SameShape(absl::string_view loss, const at::Tensor& a, const at::Tensor& b,
                       absl::string_view a_name = "student", absl::string_view b_name = "teacher");

}  // namespace kd

#endif  // LIBKD_DISTILL_LOSSES_LOSS_H_
