// What the scheduler files of distill/boxes/optim share (schedulers.cc, plateau_scheduler.cc,
// one_cycle_scheduler.cc, composed_schedulers.cc): a schedule as a closed form of the period,
// setting the optimizer's rates, and the children a composed scheduler's factory receives.
// Private to //distill/boxes/optim:optim.
#ifndef LIBKD_DISTILL_BOXES_OPTIM_INTERNAL_SCHEDULER_FORMS_H_
#define LIBKD_DISTILL_BOXES_OPTIM_INTERNAL_SCHEDULER_FORMS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include <torch/optim/optimizer.h>

#include "distill/boxes/optim/optim.h"

namespace kd {
namespace optim_internal {

using Children = std::vector<SchedulerSpec>;

inline void SetLearningRates(torch::optim::Optimizer& optimizer, const std::vector<double>& lrs) {
  auto& groups = optimizer.param_groups();
  for (size_t i = 0; i < groups.size() && i < lrs.size(); ++i) groups[i].options().set_lr(lrs[i]);
}

// A schedule whose rate is rate(base, epoch) for each group's initial rate:
// torch's closed forms.
class ClosedFormScheduler : public LrScheduler {
 public:
  using Rate = std::function<double(double base, int64_t epoch)>;
  // `chainable`: rate(base, e) = base * rate(1, e), a factor ChainedScheduler can multiply.
  ClosedFormScheduler(torch::optim::Optimizer& optimizer, Rate rate, bool chainable = false)
      : optimizer_(optimizer),
        base_(LearningRates(optimizer)),
        rate_(std::move(rate)),
        chainable_(chainable) {
    Apply();
  }
  double RateAt(double base, int64_t epoch) const { return rate_(base, epoch); }
  bool chainable() const { return chainable_; }
  void Step(const SchedulerStepArgs& args) override {
    epoch_ = args.epoch.value_or(epoch_ + 1);
    Apply();
  }
  std::vector<double> State() const override {
    std::vector<double> state = {static_cast<double>(epoch_)};
    state.insert(state.end(), base_.begin(), base_.end());
    return state;
  }
  void LoadState(const std::vector<double>& state) override {
    if (state.empty()) return;
    epoch_ = static_cast<int64_t>(state[0]);
    base_.assign(state.begin() + 1, state.end());
    Apply();
  }

 private:
  void Apply() {
    std::vector<double> lrs;
    for (double base : base_) lrs.push_back(rate_(base, epoch_));
    SetLearningRates(optimizer_, lrs);
  }

  torch::optim::Optimizer& optimizer_;
  std::vector<double> base_;
  Rate rate_;
  bool chainable_;
  int64_t epoch_ = 0;
};

// base * factor(epoch); `chainable` unless torch's own form sets the rate outright (LambdaLR).
inline std::unique_ptr<LrScheduler> Factor(torch::optim::Optimizer& optimizer,
                                           std::function<double(int64_t)> factor,
                                           bool chainable = true) {
  return std::make_unique<ClosedFormScheduler>(
      optimizer, [factor = std::move(factor)](double base, int64_t e) { return base * factor(e); },
      chainable);
}

}  // namespace optim_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_OPTIM_INTERNAL_SCHEDULER_FORMS_H_
