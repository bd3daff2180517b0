#include "distill/losses/loss.h"

#include <cmath>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/core/Reduction.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "distill/config/kwargs.h"

namespace kd {

absl::StatusOr<at::Tensor> LossInputs::Get(absl::string_view loss, absl::string_view name) const {
  auto it = inputs_.find(name);
  if (it != inputs_.end() && it->second.defined()) return it->second;
  std::vector<std::string> given;
  for (const auto& [n, t] : inputs_) given.push_back(n);
  return absl::InvalidArgumentError(
      absl::StrCat("loss \"", loss, "\" needs the input \"", name,
                   "\"; given: ", given.empty() ? "none" : absl::StrJoin(given, ", "),
                   " (add inputs { arg: \"", name, "\" ... } to its term)"));
}

at::Tensor LossInputs::GetOptional(absl::string_view name) const {
  auto it = inputs_.find(name);
  return it == inputs_.end() ? at::Tensor() : it->second;
}

namespace {

class StudentTeacherLoss final : public Loss {
 public:
  using Fn = std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>;
  StudentTeacherLoss(std::string key, PairShape shape, Fn fn)
      : key_(std::move(key)), shape_(shape), fn_(std::move(fn)) {}

  absl::StatusOr<at::Tensor> Forward(const LossInputs& inputs) override {
    KD_ASSIGN_OR_RETURN(at::Tensor student, inputs.Get(key_, "student"));
    KD_ASSIGN_OR_RETURN(at::Tensor teacher, inputs.Get(key_, "teacher"));
    const bool fits = shape_ == PairShape::kSame ? student.sizes().equals(teacher.sizes())
                                                 : student.dim() > 0 && teacher.dim() > 0 &&
                                                       student.size(0) == teacher.size(0);
    if (!fits) {
      return absl::InvalidArgumentError(
          absl::StrCat("loss \"", key_, "\": student has shape ", ShapeString(student),
                       " but teacher has ", ShapeString(teacher),
                       shape_ == PairShape::kSame ? "" : " (their batch sizes must be equal)"));
    }
    absl::StatusOr<at::Tensor> value =
        CallTorch([&] { return fn_(student, teacher); }, absl::StatusCode::kInvalidArgument);
    if (!value.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("loss \"", key_, "\" on student ", ShapeString(student), " and teacher ",
                       ShapeString(teacher), ": ", value.status().message()));
    }
    return value;
  }

 private:
  std::string key_;
  PairShape shape_;
  Fn fn_;
};

class FunctionLoss final : public Loss {
 public:
  explicit FunctionLoss(LossFn fn) : fn_(std::move(fn)) {}
  absl::StatusOr<at::Tensor> Forward(const LossInputs& inputs) override {
    absl::StatusOr<absl::StatusOr<at::Tensor>> result =
        CallTorch([&] { return fn_(inputs); }, absl::StatusCode::kInvalidArgument);
    if (!result.ok()) return result.status();
    return *std::move(result);
  }

 private:
  LossFn fn_;
};

}  // namespace

std::unique_ptr<Loss> MakeFunctionLoss(LossFn fn) {
  return std::make_unique<FunctionLoss>(std::move(fn));
}

std::unique_ptr<Loss> MakeStudentTeacherLoss(
    std::string key, PairShape shape,
    std::function<at::Tensor(const at::Tensor& student, const at::Tensor& teacher)> fn) {
  return std::make_unique<StudentTeacherLoss>(std::move(key), shape, std::move(fn));
}

Registry<LossFactory>& LossRegistry() {
  static Registry<LossFactory>* const registry = NewGlobalRegistry<LossFactory>("loss");
  return *registry;
}

absl::StatusOr<std::unique_ptr<Loss>> MakeLoss(absl::string_view key, const Kwargs& kwargs) {
  Registry<LossFactory>& registry = LossRegistry();
  KD_ASSIGN_OR_RETURN(const LossFactory* factory, registry.Get(key));
  KD_ASSIGN_OR_RETURN(
      const Kwargs resolved,
      ResolvePluginKwargs(registry, key, kwargs, absl::StrCat("loss \"", key, "\"")));
  return (*factory)(resolved);
}

KwargSpec ReductionKwargSpec() {
  return {.name = "reduction",
          .type = KwargType::kString,
          .doc = "mean, sum or none",
          .default_value = "mean",
          .choices = {"mean", "sum", "none"}};
}

KwargSpec ReductionKwargSpec(std::vector<std::string> choices, std::string default_value) {
  return {.name = "reduction",
          .type = KwargType::kString,
          .doc = "the reduction over the batch",
          .default_value = std::move(default_value),
          .choices = std::move(choices)};
}

KwargSpec JsdBetaKwargSpec() {
  return {.name = "beta",
          .type = KwargType::kNumber,
          .doc = "teacher weight in the mixture, strictly between 0 and 1",
          .default_value = 0.5,
          .min = 0,
          .max = 1,
          .min_exclusive = true,
          .max_exclusive = true};
}

int64_t ReductionEnum(absl::string_view reduction) {
  if (reduction == "sum") return at::Reduction::Sum;
  if (reduction == "none") return at::Reduction::None;
  return at::Reduction::Mean;
}

int64_t ReductionKwarg(const Kwargs& kwargs) {
  return ReductionEnum(StringKwarg(kwargs, "reduction"));
}

at::Tensor Standardize(const at::Tensor& x, double eps) {
  return x.sub(x.mean(-1, /*keepdim=*/true))
      .div(x.std(-1, /*unbiased=*/true, /*keepdim=*/true).add(eps));
}

at::Tensor L2Normalize(const at::Tensor& x, int64_t dim, double eps) {
  return x / x.norm(2, dim, /*keepdim=*/true).clamp_min(eps);
}

at::Tensor PivotAngles(const at::Tensor& e) {
  const at::Tensor n = L2Normalize(e.unsqueeze(0) - e.unsqueeze(1), 2);
  return at::bmm(n, n.transpose(1, 2));
}

std::pair<at::Tensor, at::Tensor> NewLinear(int64_t in, int64_t out,
                                            const at::TensorOptions& options) {
  // kaiming_uniform_(a=sqrt(5)) on the weight gives the same bound as the bias's.
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  at::Tensor weight = at::empty({out, in}, options).uniform_(-bound, bound).requires_grad_(true);
  at::Tensor bias = at::empty({out}, options).uniform_(-bound, bound).requires_grad_(true);
  return {weight, bias};
}

absl::Status SameShape(absl::string_view loss, const at::Tensor& a, const at::Tensor& b,
                       absl::string_view a_name, absl::string_view b_name) {
  if (a.sizes().equals(b.sizes())) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("loss \"", loss, "\": ", a_name, " has shape ",
                                                 ShapeString(a), " but ", b_name, " has ",
                                                 ShapeString(b)));
}

}  // namespace kd
