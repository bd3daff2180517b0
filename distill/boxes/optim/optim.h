// Optimizers and learning-rate schedulers by config key, as boxes build them from a stage's
// OptimizerConfig and SchedulerConfig.
//
//   KD_ASSIGN_OR_RETURN(std::unique_ptr<torch::optim::Optimizer> sgd,
//                       kd::MakeOptimizer("SGD", params, {{"lr", 0.1}, {"momentum", 0.9}}));
//   KD_ASSIGN_OR_RETURN(std::unique_ptr<kd::LrScheduler> steps,
//                       kd::MakeScheduler("MultiStepLR", *sgd, kwargs));
//   steps->Step({});   // after each epoch (or each N batches)
//
// Optimizers are libtorch's own (torch::optim: SGD with momentum / nesterov / weight decay,
// Adam, AdamW, RMSprop, Adagrad), registered under torch's class names; torch.optim's others
// (Adamax, NAdam, RAdam, SparseAdam) libtorch lacks, and LBFGS needs a closure that reruns the
// forward, which a box's step does not give. Schedulers follow torch.optim.lr_scheduler with its
// kwargs (StepLR, MultiStepLR, ExponentialLR, ConstantLR, LinearLR, PolynomialLR,
// CosineAnnealingLR, CosineAnnealingWarmRestarts, LambdaLR by a registered function, OneCycleLR,
// SequentialLR, ChainedScheduler, ReduceLROnPlateau; torchdistill's poly_lr_scheduler); libtorch
// ships only StepLR and ReduceLROnPlateau, and neither exposes its state for checkpoints, so all
// are written here against the optimizer's learning rates, as closed forms of the period (a
// resumed schedule continues exactly).
#ifndef LIBKD_DISTILL_BOXES_OPTIM_OPTIM_H_
#define LIBKD_DISTILL_BOXES_OPTIM_OPTIM_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/kwargs.h"
#include "base/registry.h"
#include "distill/procs/training_context.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace kd {

// A parameter group (torch.optim's param_groups): its tensors, and kwargs
// overriding the optimizer's for this group (lr, weight_decay, momentum, ...).
struct ParamGroup {
  std::vector<at::Tensor> params;
  Kwargs kwargs;
};

// Builds an optimizer over `groups`; `defaults` are the optimizer's kwargs,
// which each group's own kwargs override.
using OptimizerFactory = std::function<absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>>(
    std::vector<ParamGroup> groups, const Kwargs& defaults)>;

// The optimizers by config key ("optimizer" registry kind).
Registry<OptimizerFactory>& OptimizerRegistry();

// The optimizer `key` over `params` (one group) with `kwargs` checked against
// its contract.
absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(
    absl::string_view key, std::vector<at::Tensor> params, const Kwargs& kwargs);

// The optimizer `key` over parameter groups, in order (torch.optim's
// `SGD([{"params": ..., "lr": 0.01}, ...], lr=0.1)`): each group's kwargs
// merged over `kwargs` are checked against the contract. A tensor in two
// groups, or a group without tensors, is InvalidArgument naming the group.
absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(
    absl::string_view key, std::vector<ParamGroup> groups, const Kwargs& kwargs);

// A learning-rate schedule over an optimizer's parameter groups: each Step sets the rates for
// the next period from the initial ones (closed forms, as torch's get_lr with last_epoch).
class LrScheduler {
 public:
  virtual ~LrScheduler() = default;
  // One period done: sets the learning rates for the next one.
  virtual void Step(const SchedulerStepArgs& args) = 0;
  // What a checkpoint saves and restores (the step count and anything else the schedule
  // keeps).
  virtual std::vector<double> State() const = 0;
  virtual void LoadState(const std::vector<double>& state) = 0;
};

// A scheduler's key and kwargs, and those it composes (SequentialLR's and ChainedScheduler's
// `schedulers`, in order; empty for the others).
struct SchedulerSpec {
  std::string key;
  Kwargs kwargs;
  std::vector<SchedulerSpec> children;
};

using SchedulerFactory = std::function<absl::StatusOr<std::unique_ptr<LrScheduler>>(
    torch::optim::Optimizer& optimizer, const Kwargs& kwargs,
    const std::vector<SchedulerSpec>& children)>;

// The schedulers by config key ("scheduler" registry kind).
Registry<SchedulerFactory>& SchedulerRegistry();

// The scheduler `spec` over `optimizer`'s groups (their rates now are the initial ones), its
// kwargs checked against its contract.
absl::StatusOr<std::unique_ptr<LrScheduler>> MakeScheduler(const SchedulerSpec& spec,
                                                           torch::optim::Optimizer& optimizer);
absl::StatusOr<std::unique_ptr<LrScheduler>> MakeScheduler(absl::string_view key,
                                                           torch::optim::Optimizer& optimizer,
                                                           const Kwargs& kwargs);

// LambdaLR's functions by name (registry kind "lr_lambda"): the factor of the initial rate after
// `epoch` periods, as torch's lr_lambda. Register one where it is linked:
//   KD_REGISTER(kd::LrLambdaRegistry(), "inverse_time",
//               kd::LrLambda([](int64_t e) { return 1.0 / (1 + e); }), kd::kAnyKwargs);
using LrLambda = std::function<double(int64_t epoch)>;
Registry<LrLambda>& LrLambdaRegistry();

// The learning rate of each parameter group.
std::vector<double> LearningRates(const torch::optim::Optimizer& optimizer);

// The optimizer's registry key by its type ("SGD", "Adam", "AdamW", ...; "other" for one built
// elsewhere), and the number of parameters in each of its groups: what a checkpoint of its state
// must match before libtorch reads it (libtorch's own load asserts, as "report a bug to PyTorch").
std::string OptimizerKind(const torch::optim::Optimizer& optimizer);
std::vector<int64_t> ParamGroupSizes(const torch::optim::Optimizer& optimizer);

}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_OPTIM_OPTIM_H_
