// torch's ReduceLROnPlateau as the scheduler "ReduceLROnPlateau".
#include <algorithm>
#include <cmath>
#include <cstdint>
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
using optim_internal::SetLearningRates;

// torch's ReduceLROnPlateau: the rates times `factor` after `patience` periods
// without an improvement of the metric beyond `threshold`, then `cooldown`
// periods of rest.
class PlateauScheduler : public LrScheduler {
 public:
  PlateauScheduler(torch::optim::Optimizer& optimizer, const Kwargs& kwargs)
      : optimizer_(optimizer),
        max_(StringKwarg(kwargs, "mode") == "max"),
        rel_(StringKwarg(kwargs, "threshold_mode") == "rel"),
        factor_(NumberKwarg(kwargs, "factor")),
        threshold_(NumberKwarg(kwargs, "threshold")),
        min_lr_(NumberKwarg(kwargs, "min_lr")),
        eps_(NumberKwarg(kwargs, "eps")),
        patience_(IntKwarg(kwargs, "patience")),
        cooldown_(IntKwarg(kwargs, "cooldown")),
        best_(max_ ? -std::numeric_limits<double>::infinity()
                   : std::numeric_limits<double>::infinity()) {}

  void Step(const SchedulerStepArgs& args) override {
    if (!args.metric.has_value()) return;  // nothing to judge by
    const double m = *args.metric;
    ++epoch_;
    if (Better(m)) {
      best_ = m;
      bad_ = 0;
    } else {
      ++bad_;
    }
    if (cooldown_counter_ > 0) {
      --cooldown_counter_;
      bad_ = 0;
    }
    if (bad_ > patience_) {
      std::vector<double> lrs = LearningRates(optimizer_);
      for (double& lr : lrs) {
        const double reduced = std::max(lr * factor_, min_lr_);
        if (lr - reduced > eps_) lr = reduced;
      }
      SetLearningRates(optimizer_, lrs);
      cooldown_counter_ = cooldown_;
      bad_ = 0;
    }
  }
  std::vector<double> State() const override {
    std::vector<double> state = {static_cast<double>(epoch_), best_, static_cast<double>(bad_),
                                 static_cast<double>(cooldown_counter_)};
    const std::vector<double> lrs = LearningRates(optimizer_);
    state.insert(state.end(), lrs.begin(), lrs.end());
    return state;
  }
  void LoadState(const std::vector<double>& state) override {
    if (state.size() < 4) return;
    epoch_ = static_cast<int64_t>(state[0]);
    best_ = state[1];
    bad_ = static_cast<int64_t>(state[2]);
    cooldown_counter_ = static_cast<int64_t>(state[3]);
    SetLearningRates(optimizer_, std::vector<double>(state.begin() + 4, state.end()));
  }

 private:
  bool Better(double m) const {
    if (rel_) return max_ ? m > best_ * (1 + threshold_) : m < best_ * (1 - threshold_);
    return max_ ? m > best_ + threshold_ : m < best_ - threshold_;
  }

  torch::optim::Optimizer& optimizer_;
  bool max_, rel_;
  double factor_, threshold_, min_lr_, eps_;
  int64_t patience_, cooldown_;
  double best_;
  int64_t epoch_ = 0, bad_ = 0, cooldown_counter_ = 0;
};

KD_REGISTER(
    SchedulerRegistry(), "ReduceLROnPlateau",
    ([](torch::optim::Optimizer& optimizer, const Kwargs& kwargs,
        const Children&) -> absl::StatusOr<std::unique_ptr<LrScheduler>> {
      return std::unique_ptr<LrScheduler>(std::make_unique<PlateauScheduler>(optimizer, kwargs));
    }),
    {{.name = "mode",
      .type = KwargType::kString,
      .doc = "min or max: whether the metric should fall or rise",
      .default_value = "min",
      .choices = {"min", "max"}},
     {.name = "factor",
      .type = KwargType::kNumber,
      .doc = "the rate's multiplier on a plateau",
      .default_value = 0.1,
      .min = 0,
      .max = 1,
      .max_exclusive = true},
     {.name = "patience",
      .type = KwargType::kInteger,
      .doc = "periods without improvement before a reduction",
      .default_value = 10,
      .min = 0},
     NonNegativeNumberSpec("threshold", "the least change that counts as an improvement", 1e-4),
     {.name = "threshold_mode",
      .type = KwargType::kString,
      .doc = "rel or abs",
      .default_value = "rel",
      .choices = {"rel", "abs"}},
     {.name = "cooldown",
      .type = KwargType::kInteger,
      .doc = "periods of rest after a reduction",
      .default_value = 0,
      .min = 0},
     NonNegativeNumberSpec("min_lr", "the lowest rate", 0.0),
     NonNegativeNumberSpec("eps", "reductions smaller than this are skipped", 1e-8)});

}  // namespace
}  // namespace kd
