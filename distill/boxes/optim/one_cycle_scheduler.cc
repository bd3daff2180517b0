// torch's OneCycleLR as the scheduler "OneCycleLR": the rates and the momenta (SGD's and
// RMSprop's momentum, Adam's and AdamW's beta1) annealed through two or three phases.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include "absl/strings/str_cat.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "distill/boxes/optim/internal/scheduler_forms.h"
#include "distill/boxes/optim/optim.h"
#include "distill/config/kwargs.h"

namespace kd {
namespace {

using optim_internal::Children;

// Whether a group's options have a momentum OneCycleLR can cycle (SGD's and RMSprop's
// momentum, Adam's and AdamW's beta1), and setting it.
bool HasMomentum(torch::optim::OptimizerOptions& options) {
  return dynamic_cast<torch::optim::SGDOptions*>(&options) != nullptr ||
         dynamic_cast<torch::optim::RMSpropOptions*>(&options) != nullptr ||
         dynamic_cast<torch::optim::AdamOptions*>(&options) != nullptr ||
         dynamic_cast<torch::optim::AdamWOptions*>(&options) != nullptr;
}

void SetMomentum(torch::optim::OptimizerOptions& options, double momentum) {
  if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&options)) {
    sgd->momentum(momentum);
  } else if (auto* rms = dynamic_cast<torch::optim::RMSpropOptions*>(&options)) {
    rms->momentum(momentum);
  } else if (auto* adam = dynamic_cast<torch::optim::AdamOptions*>(&options)) {
    adam->betas({momentum, std::get<1>(adam->betas())});
  } else if (auto* adamw = dynamic_cast<torch::optim::AdamWOptions*>(&options)) {
    adamw->betas({momentum, std::get<1>(adamw->betas())});
  }
}

// torch's OneCycleLR: the rate (and, with cycle_momentum, the momentum or Adam's beta1) annealed
// through two phases (warm-up to max_lr, then down to max_lr / div_factor / final_div_factor)
// or three, over total_steps steps; the optimizer's own rates are not used.
class OneCycleScheduler : public LrScheduler {
 public:
  struct Phase {
    double end_step;
    int start_lr, end_lr;              // 0: initial, 1: max, 2: min
    int start_momentum, end_momentum;  // 0: base, 1: max
  };

  OneCycleScheduler(torch::optim::Optimizer& optimizer, const Kwargs& kwargs, int64_t total)
      : optimizer_(optimizer),
        total_(total),
        cosine_(StringKwarg(kwargs, "anneal_strategy") == "cos"),
        cycle_momentum_(BoolKwarg(kwargs, "cycle_momentum")) {
    const size_t groups = optimizer.param_groups().size();
    const std::vector<double> max_lr = PerGroup(kwargs, "max_lr", groups);
    const std::vector<double> base_m = PerGroup(kwargs, "base_momentum", groups);
    const std::vector<double> max_m = PerGroup(kwargs, "max_momentum", groups);
    const double div = NumberKwarg(kwargs, "div_factor");
    const double final_div = NumberKwarg(kwargs, "final_div_factor");
    for (size_t g = 0; g < groups; ++g) {
      const double initial = max_lr[g] / div;
      lrs_.push_back({initial, max_lr[g], initial / final_div});
      momenta_.push_back({base_m[g], max_m[g]});
    }
    const double pct = NumberKwarg(kwargs, "pct_start");
    const double t = static_cast<double>(total);
    if (BoolKwarg(kwargs, "three_phase")) {
      phases_ = {{pct * t - 1, 0, 1, 1, 0}, {2 * pct * t - 2, 1, 0, 0, 1}, {t - 1, 0, 2, 1, 1}};
    } else {
      phases_ = {{pct * t - 1, 0, 1, 1, 0}, {t - 1, 1, 2, 0, 1}};
    }
    Apply();
  }

  void Step(const SchedulerStepArgs& args) override {
    step_ = args.epoch.value_or(step_ + 1);
    Apply();
  }
  std::vector<double> State() const override { return {static_cast<double>(step_)}; }
  void LoadState(const std::vector<double>& state) override {
    if (state.empty()) return;
    step_ = static_cast<int64_t>(state[0]);
    Apply();
  }

 private:
  static std::vector<double> PerGroup(const Kwargs& kwargs, absl::string_view name, size_t groups) {
    const c10::IValue& value = *FindKwarg(kwargs, name);
    if (!value.isList()) return std::vector<double>(groups, value.toDouble());
    std::vector<double> out;
    for (const c10::IValue& v : value.toListRef()) out.push_back(v.toDouble());
    return out;
  }

  double Anneal(double start, double end, double pct) const {
    return cosine_ ? end + (start - end) / 2 * (1 + std::cos(M_PI * pct))
                   : (end - start) * pct + start;
  }

  void Apply() {
    // Past total_steps torch raises; the last step's values stay here.
    const double step = static_cast<double>(std::min(step_, total_));
    auto& groups = optimizer_.param_groups();
    for (size_t g = 0; g < groups.size() && g < lrs_.size(); ++g) {
      double start_step = 0;
      for (size_t i = 0; i < phases_.size(); ++i) {
        const Phase& phase = phases_[i];
        if (step <= phase.end_step || i + 1 == phases_.size()) {
          const double pct = (step - start_step) / (phase.end_step - start_step);
          groups[g].options().set_lr(Anneal(lrs_[g][phase.start_lr], lrs_[g][phase.end_lr], pct));
          if (cycle_momentum_) {
            SetMomentum(groups[g].options(), Anneal(momenta_[g][phase.start_momentum],
                                                    momenta_[g][phase.end_momentum], pct));
          }
          break;
        }
        start_step = phase.end_step;
      }
    }
  }

  torch::optim::Optimizer& optimizer_;
  int64_t total_;
  bool cosine_, cycle_momentum_;
  std::vector<std::array<double, 3>> lrs_;      // initial, max, min of each group
  std::vector<std::array<double, 2>> momenta_;  // base, max of each group
  std::vector<Phase> phases_;
  int64_t step_ = 0;
};

absl::StatusOr<std::unique_ptr<LrScheduler>> MakeOneCycleLr(torch::optim::Optimizer& optimizer,
                                                            const Kwargs& kwargs, const Children&) {
  int64_t total = 0;
  if (const c10::IValue* steps = FindKwarg(kwargs, "total_steps")) {
    total = steps->toInt();
  } else if (FindKwarg(kwargs, "epochs") != nullptr &&
             FindKwarg(kwargs, "steps_per_epoch") != nullptr) {
    total = IntKwarg(kwargs, "epochs") * IntKwarg(kwargs, "steps_per_epoch");
  } else {
    return absl::InvalidArgumentError(
        "OneCycleLR: give total_steps, or epochs and steps_per_epoch (torch's rule)");
  }
  const size_t groups = optimizer.param_groups().size();
  for (const char* name : {"max_lr", "base_momentum", "max_momentum"}) {
    const c10::IValue& value = *FindKwarg(kwargs, name);
    if (value.isList() && value.toListRef().size() != groups) {
      return absl::InvalidArgumentError(
          absl::StrCat("OneCycleLR: ", name, " gives ", value.toListRef().size(), " values for ",
                       groups, " parameter groups (torch's rule: one each)"));
    }
  }
  if (BoolKwarg(kwargs, "cycle_momentum")) {
    for (auto& group : optimizer.param_groups()) {
      if (!HasMomentum(group.options())) {
        return absl::InvalidArgumentError(
            "OneCycleLR: cycle_momentum needs an optimizer with a momentum or Adam's betas "
            "(SGD, RMSprop, Adam, AdamW); set cycle_momentum: false");
      }
    }
  }
  return std::unique_ptr<LrScheduler>(
      std::make_unique<OneCycleScheduler>(optimizer, kwargs, total));
}

// A number > 0, or a list of them (one per parameter group).
absl::Status NumberOrListCheck(const KwargsView& view, const char* name) {
  const c10::IValue* value = FindKwarg(view.kwargs, name);
  if (value == nullptr) return absl::OkStatus();
  auto positive = [](const c10::IValue& v) {
    return (v.isDouble() || v.isInt()) && v.toDouble() > 0 && std::isfinite(v.toDouble());
  };
  bool ok = positive(*value);
  if (value->isList()) {
    ok = !value->toListRef().empty();
    for (const c10::IValue& v : value->toListRef()) ok = ok && positive(v);
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "OneCycleLR: ", name, " must be a number > 0 or a list of them, one per parameter group"));
}

KD_REGISTER(
    SchedulerRegistry(), "OneCycleLR", MakeOneCycleLr,
    {{.name = "max_lr",
      .type = KwargType::kAny,
      .doc = "the peak rate (a number, or one per parameter group)",
      .required = true},
     {.name = "total_steps",
      .type = KwargType::kInteger,
      .doc = "steps of the cycle (else epochs * steps_per_epoch)",
      .min = 1},
     {.name = "epochs", .type = KwargType::kInteger, .doc = "epochs of the cycle", .min = 1},
     {.name = "steps_per_epoch",
      .type = KwargType::kInteger,
      .doc = "scheduler steps per epoch",
      .min = 1},
     {.name = "pct_start",
      .type = KwargType::kNumber,
      .doc = "the warm-up's share of the cycle",
      .default_value = 0.3,
      .min = 0,
      .max = 1,
      .min_exclusive = true},
     {.name = "anneal_strategy",
      .type = KwargType::kString,
      .doc = "cos or linear",
      .default_value = "cos",
      .choices = {"cos", "linear"}},
     {.name = "cycle_momentum",
      .type = KwargType::kBool,
      .doc = "the momentum (Adam's beta1) cycled against the rate",
      .default_value = true},
     {.name = "base_momentum",
      .type = KwargType::kAny,
      .doc = "the momentum at the peak rate (a number, or one per group)",
      .default_value = 0.85},
     {.name = "max_momentum",
      .type = KwargType::kAny,
      .doc = "the momentum at the lowest rates (a number, or one per group)",
      .default_value = 0.95},
     PositiveNumberSpec("div_factor", "max_lr / the initial rate", 25.0),
     PositiveNumberSpec("final_div_factor", "the initial rate / the final rate", 1e4),
     {.name = "three_phase",
      .type = KwargType::kBool,
      .doc = "fastai's three phases (back to the initial rate, then down)",
      .default_value = false}},
    [](const KwargsView& view) -> absl::Status {
      for (const char* name : {"max_lr", "base_momentum", "max_momentum"}) {
        KD_RETURN_IF_ERROR(NumberOrListCheck(view, name));
      }
      return absl::OkStatus();
    });
}  // namespace
}  // namespace kd
