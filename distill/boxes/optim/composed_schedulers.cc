// torch's SequentialLR and ChainedScheduler as the schedulers of those names, over the closed
// forms of their `schedulers` (SchedulerConfig.schedulers).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/optim/optimizer.h>

#include "absl/strings/str_cat.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "distill/boxes/optim/internal/scheduler_forms.h"
#include "distill/boxes/optim/optim.h"
#include "distill/config/kwargs.h"

namespace kd {
namespace {

using optim_internal::Children;
using optim_internal::ClosedFormScheduler;
using optim_internal::SetLearningRates;

// ---- Composites: SequentialLR, ChainedScheduler -------------------------------------------

// The children's closed forms, each built from the optimizer's rates as they are now (a
// child's construction sets them: torch's schedulers also each see the initial rates, which
// SequentialLR restores after making them).
absl::StatusOr<std::vector<std::unique_ptr<LrScheduler>>> MakeChildren(
    torch::optim::Optimizer& optimizer, const Children& children, absl::string_view owner,
    bool chain) {
  if (children.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(owner, ": give the schedulers it composes (`schedulers`, in order)"));
  }
  const std::vector<double> initial = LearningRates(optimizer);
  std::vector<std::unique_ptr<LrScheduler>> made;
  for (size_t i = 0; i < children.size(); ++i) {
    SetLearningRates(optimizer, initial);
    const std::string where =
        absl::StrCat(owner, ", schedulers[", i, "] \"", children[i].key, "\"");
    absl::StatusOr<std::unique_ptr<LrScheduler>> child = MakeScheduler(children[i], optimizer);
    if (!child.ok()) return WithContext(where, child.status());
    const auto* closed = dynamic_cast<const ClosedFormScheduler*>(child->get());
    if (closed == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          where,
          ": only schedules of the epoch alone compose (StepLR, MultiStepLR, ExponentialLR, "
          "ConstantLR, LinearLR, PolynomialLR, CosineAnnealingLR, "
          "CosineAnnealingWarmRestarts, LambdaLR; not OneCycleLR or ReduceLROnPlateau)"));
    }
    if (chain && !closed->chainable()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where,
          ": torch's ChainedScheduler multiplies its schedulers' factors, and this one "
          "is not a factor of the rate (LambdaLR and poly_lr_scheduler set it outright; "
          "cosines with an eta_min add to it)"));
    }
    made.push_back(*std::move(child));
  }
  SetLearningRates(optimizer, initial);
  return made;
}

absl::StatusOr<std::unique_ptr<LrScheduler>> MakeSequentialLr(torch::optim::Optimizer& optimizer,
                                                              const Kwargs& kwargs,
                                                              const Children& children) {
  const std::vector<int64_t> milestones = IntListKwarg(kwargs, "milestones");
  if (milestones.size() + 1 != children.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SequentialLR: ", children.size(), " schedulers need ", children.size() - 1,
                     " milestones, not ", milestones.size(), " (torch's rule)"));
  }
  if (!std::is_sorted(milestones.begin(), milestones.end())) {
    return absl::InvalidArgumentError("SequentialLR: milestones must increase");
  }
  KD_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<LrScheduler>> made,
                      MakeChildren(optimizer, children, "SequentialLR", /*chain=*/false));
  std::vector<std::shared_ptr<LrScheduler>> parts(std::make_move_iterator(made.begin()),
                                                  std::make_move_iterator(made.end()));
  // torch: the child of the period (bisect_right over the milestones), restarted at its
  // milestone (step(0): its closed form from the initial rates).
  return std::unique_ptr<LrScheduler>(
      std::make_unique<ClosedFormScheduler>(optimizer, [=](double base, int64_t e) {
        const size_t i =
            std::upper_bound(milestones.begin(), milestones.end(), e) - milestones.begin();
        const int64_t start = i == 0 ? 0 : milestones[i - 1];
        return static_cast<const ClosedFormScheduler&>(*parts[i]).RateAt(base, e - start);
      }));
}

absl::StatusOr<std::unique_ptr<LrScheduler>> MakeChainedScheduler(
    torch::optim::Optimizer& optimizer, const Kwargs&, const Children& children) {
  KD_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<LrScheduler>> made,
                      MakeChildren(optimizer, children, "ChainedScheduler", /*chain=*/true));
  std::vector<std::shared_ptr<LrScheduler>> parts(std::make_move_iterator(made.begin()),
                                                  std::make_move_iterator(made.end()));
  return std::unique_ptr<LrScheduler>(std::make_unique<ClosedFormScheduler>(
      optimizer,
      [=](double base, int64_t e) {
        double rate = base;
        for (const auto& part : parts) {
          rate *= static_cast<const ClosedFormScheduler&>(*part).RateAt(1.0, e);
        }
        return rate;
      },
      /*chainable=*/true));
}

KD_REGISTER(SchedulerRegistry(), "SequentialLR", MakeSequentialLr,
            {{.name = "milestones",
              .type = KwargType::kIntegerList,
              .doc = "periods at which the next of `schedulers` takes over",
              .min = 1,
              .required = true}});
KD_REGISTER(SchedulerRegistry(), "ChainedScheduler", MakeChainedScheduler,
            std::vector<KwargSpec>{});
}  // namespace
}  // namespace kd
