// The learning-rate schedulers by torch's names: closed forms of StepLR, MultiStepLR,
// ExponentialLR, ConstantLR, LinearLR, PolynomialLR, CosineAnnealingLR,
// CosineAnnealingWarmRestarts, LambdaLR (a registered function) and torchdistill's
// poly_lr_scheduler, their compositions SequentialLR and ChainedScheduler, OneCycleLR (rates and
// momenta), and ReduceLROnPlateau's state machine.
#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <limits>
#include <string>
#include <utility>

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include "absl/strings/str_cat.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "distill/boxes/optim/optim.h"
#include "distill/config/kwargs.h"
#include "distill/config/plugin_kinds.h"

namespace kd {
namespace {

void SetLearningRates(torch::optim::Optimizer& optimizer, const std::vector<double>& lrs) {
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

using Children = std::vector<SchedulerSpec>;

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

// base * factor(epoch); `chainable` unless torch's own form sets the rate outright (LambdaLR).
std::unique_ptr<LrScheduler> Factor(torch::optim::Optimizer& optimizer,
                                    std::function<double(int64_t)> factor, bool chainable = true) {
  return std::make_unique<ClosedFormScheduler>(
      optimizer, [factor = std::move(factor)](double base, int64_t e) { return base * factor(e); },
      chainable);
}

absl::StatusOr<std::unique_ptr<LrScheduler>> MakeStepLr(torch::optim::Optimizer& optimizer,
                                                        const Kwargs& kwargs, const Children&) {
  const int64_t step = IntKwarg(kwargs, "step_size");
  const double gamma = NumberKwarg(kwargs, "gamma");
  return Factor(optimizer, [=](int64_t e) { return std::pow(gamma, e / step); });
}

absl::StatusOr<std::unique_ptr<LrScheduler>> MakeMultiStepLr(torch::optim::Optimizer& optimizer,
                                                             const Kwargs& kwargs,
                                                             const Children&) {
  const std::vector<int64_t> milestones = IntListKwarg(kwargs, "milestones");
  const double gamma = NumberKwarg(kwargs, "gamma");
  return Factor(optimizer, [=](int64_t e) {
    const auto passed =
        std::count_if(milestones.begin(), milestones.end(), [e](int64_t m) { return m <= e; });
    return std::pow(gamma, static_cast<double>(passed));
  });
}

absl::StatusOr<std::unique_ptr<LrScheduler>> MakeLinearLr(torch::optim::Optimizer& optimizer,
                                                          const Kwargs& kwargs, const Children&) {
  const double start = NumberKwarg(kwargs, "start_factor");
  const double end = NumberKwarg(kwargs, "end_factor");
  const int64_t total = IntKwarg(kwargs, "total_iters");
  return Factor(optimizer, [=](int64_t e) {
    return start +
           (end - start) * static_cast<double>(std::min(e, total)) / static_cast<double>(total);
  });
}

// ---- torch's other closed forms -------------------------------------------------------------

absl::StatusOr<std::unique_ptr<LrScheduler>> MakeExponentialLr(torch::optim::Optimizer& optimizer,
                                                               const Kwargs& kwargs,
                                                               const Children&) {
  const double gamma = NumberKwarg(kwargs, "gamma");
  return Factor(optimizer, [=](int64_t e) { return std::pow(gamma, static_cast<double>(e)); });
}

absl::StatusOr<std::unique_ptr<LrScheduler>> MakeConstantLr(torch::optim::Optimizer& optimizer,
                                                            const Kwargs& kwargs, const Children&) {
  const double factor = NumberKwarg(kwargs, "factor");
  const int64_t total = IntKwarg(kwargs, "total_iters");
  return Factor(optimizer, [=](int64_t e) { return e < total ? factor : 1.0; });
}

absl::StatusOr<std::unique_ptr<LrScheduler>> MakePolynomialLr(torch::optim::Optimizer& optimizer,
                                                              const Kwargs& kwargs,
                                                              const Children&) {
  const int64_t total = IntKwarg(kwargs, "total_iters");
  const double power = NumberKwarg(kwargs, "power");
  return Factor(optimizer, [=](int64_t e) {
    return std::pow(1.0 - static_cast<double>(std::min(e, total)) / static_cast<double>(total),
                    power);
  });
}

// torchdistill's poly_lr_scheduler: LambdaLR with (1 - e / (num_iterations * num_epochs))^power
// (past the end, where Python's power of a negative number is complex, the rate stays 0).
absl::StatusOr<std::unique_ptr<LrScheduler>> MakePolyLr(torch::optim::Optimizer& optimizer,
                                                        const Kwargs& kwargs, const Children&) {
  const double total =
      static_cast<double>(IntKwarg(kwargs, "num_iterations") * IntKwarg(kwargs, "num_epochs"));
  const double power = NumberKwarg(kwargs, "power");
  return Factor(
      optimizer,
      [=](int64_t e) {
        return std::pow(std::max(0.0, 1.0 - static_cast<double>(e) / total), power);
      },
      /*chainable=*/false);
}

// torch's CosineAnnealingWarmRestarts stepped once a period: the cosine restarts after T_0
// periods, then T_0 * T_mult, ...
absl::StatusOr<std::unique_ptr<LrScheduler>> MakeWarmRestarts(torch::optim::Optimizer& optimizer,
                                                              const Kwargs& kwargs,
                                                              const Children&) {
  const int64_t t0 = IntKwarg(kwargs, "T_0"), mult = IntKwarg(kwargs, "T_mult");
  const double eta_min = NumberKwarg(kwargs, "eta_min");
  return std::unique_ptr<LrScheduler>(std::make_unique<ClosedFormScheduler>(
      optimizer,
      [=](double base, int64_t e) {
        int64_t cur = e, period = t0;
        while (cur >= period) {
          cur -= period;
          period *= mult;
        }
        return eta_min +
               (base - eta_min) *
                   (1 + std::cos(M_PI * static_cast<double>(cur) / static_cast<double>(period))) /
                   2;
      },
      /*chainable=*/eta_min == 0));
}

// torch's LambdaLR: base * the registered function's value.
absl::StatusOr<std::unique_ptr<LrScheduler>> MakeLambdaLr(torch::optim::Optimizer& optimizer,
                                                          const Kwargs& kwargs, const Children&) {
  KD_ASSIGN_OR_RETURN(const LrLambda* lambda,
                      LrLambdaRegistry().Get(StringKwarg(kwargs, "lr_lambda")));
  return Factor(optimizer, *lambda, /*chainable=*/false);
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

const KwargSpec kGamma = NonNegativeNumberSpec("gamma", "the decay factor", 0.1);

KD_REGISTER(SchedulerRegistry(), "StepLR", MakeStepLr,
            {{.name = "step_size",
              .type = KwargType::kInteger,
              .doc = "periods per decay",
              .min = 1,
              .required = true},
             kGamma});
KD_REGISTER(SchedulerRegistry(), "MultiStepLR", MakeMultiStepLr,
            {{.name = "milestones",
              .type = KwargType::kIntegerList,
              .doc = "periods at which the rate is multiplied by gamma",
              .min = 1,
              .required = true},
             kGamma});
// eta_min + (base - eta_min)(1 + cos(pi e / T_max)) / 2: not a multiple of the
// base.
KD_REGISTER(SchedulerRegistry(), "CosineAnnealingLR",
            ([](torch::optim::Optimizer& optimizer, const Kwargs& kwargs,
                const Children&) -> absl::StatusOr<std::unique_ptr<LrScheduler>> {
              const double t_max = NumberKwarg(kwargs, "T_max"),
                           eta_min = NumberKwarg(kwargs, "eta_min");
              return std::unique_ptr<LrScheduler>(std::make_unique<ClosedFormScheduler>(
                  optimizer,
                  [=](double base, int64_t e) {
                    return eta_min + (base - eta_min) *
                                         (1 + std::cos(M_PI * static_cast<double>(e) / t_max)) / 2;
                  },
                  /*chainable=*/eta_min == 0));
            }),
            {{.name = "T_max",
              .type = KwargType::kInteger,
              .doc = "periods of the half cosine",
              .min = 1,
              .required = true},
             NonNegativeNumberSpec("eta_min", "the lowest rate", 0.0)});
KD_REGISTER(SchedulerRegistry(), "LinearLR", MakeLinearLr,
            {{.name = "start_factor",
              .type = KwargType::kNumber,
              .doc = "the first period's multiple of the rate",
              .default_value = 1.0 / 3,
              .min = 0,
              .max = 1,
              .min_exclusive = true},
             {.name = "end_factor",
              .type = KwargType::kNumber,
              .doc = "the multiple reached after total_iters periods",
              .default_value = 1.0,
              .min = 0,
              .max = 1},
             {.name = "total_iters",
              .type = KwargType::kInteger,
              .doc = "periods of the ramp",
              .default_value = 5,
              .min = 1}});
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

KD_REGISTER(SchedulerRegistry(), "ExponentialLR", MakeExponentialLr,
            {{.name = "gamma",
              .type = KwargType::kNumber,
              .doc = "the rate's factor per period",
              .min = 0,
              .required = true}});
KD_REGISTER(SchedulerRegistry(), "ConstantLR", MakeConstantLr,
            {{.name = "factor",
              .type = KwargType::kNumber,
              .doc = "the rate's factor until total_iters",
              .default_value = 1.0 / 3,
              .min = 0,
              .max = 1},
             {.name = "total_iters",
              .type = KwargType::kInteger,
              .doc = "periods at the lowered rate",
              .default_value = 5,
              .min = 0}});
KD_REGISTER(SchedulerRegistry(), "PolynomialLR", MakePolynomialLr,
            {{.name = "total_iters",
              .type = KwargType::kInteger,
              .doc = "periods of the decay to 0",
              .default_value = 5,
              .min = 1},
             NonNegativeNumberSpec("power", "the polynomial's power", 1.0)});
KD_REGISTER(SchedulerRegistry(), "poly_lr_scheduler", MakePolyLr,
            {{.name = "num_iterations",
              .type = KwargType::kInteger,
              .doc = "scheduler steps per epoch (torchdistill steps it every batch)",
              .min = 1,
              .required = true},
             {.name = "num_epochs",
              .type = KwargType::kInteger,
              .doc = "epochs of the decay to 0",
              .min = 1,
              .required = true},
             NonNegativeNumberSpec("power", "the polynomial's power", 0.9)});
KD_REGISTER(SchedulerRegistry(), "CosineAnnealingWarmRestarts", MakeWarmRestarts,
            {{.name = "T_0",
              .type = KwargType::kInteger,
              .doc = "periods to the first restart",
              .min = 1,
              .required = true},
             {.name = "T_mult",
              .type = KwargType::kInteger,
              .doc = "the factor of each cycle's length over the last's",
              .default_value = 1,
              .min = 1},
             NonNegativeNumberSpec("eta_min", "the lowest rate", 0.0)});
KD_REGISTER(SchedulerRegistry(), "LambdaLR", MakeLambdaLr,
            {{.name = "lr_lambda",
              .type = KwargType::kString,
              .doc = "the registered function of the period giving the rate's factor "
                     "(kd::LrLambdaRegistry)",
              .required = true}});

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
KD_REGISTER(SchedulerRegistry(), "SequentialLR", MakeSequentialLr,
            {{.name = "milestones",
              .type = KwargType::kIntegerList,
              .doc = "periods at which the next of `schedulers` takes over",
              .min = 1,
              .required = true}});
KD_REGISTER(SchedulerRegistry(), "ChainedScheduler", MakeChainedScheduler,
            std::vector<KwargSpec>{});
}  // namespace

Registry<SchedulerFactory>& SchedulerRegistry() {
  static Registry<SchedulerFactory>* const registry =
      NewGlobalRegistry<SchedulerFactory>(std::string(kSchedulerKind));
  return *registry;
}

Registry<LrLambda>& LrLambdaRegistry() {
  static Registry<LrLambda>* const registry = NewGlobalRegistry<LrLambda>("lr_lambda");
  return *registry;
}

absl::StatusOr<std::unique_ptr<LrScheduler>> MakeScheduler(const SchedulerSpec& spec,
                                                           torch::optim::Optimizer& optimizer) {
  KD_ASSIGN_OR_RETURN(const SchedulerFactory* factory, SchedulerRegistry().Get(spec.key));
  KD_ASSIGN_OR_RETURN(const Kwargs resolved,
                      ResolvePluginKwargs(SchedulerRegistry(), spec.key, spec.kwargs,
                                          absl::StrCat(kSchedulerKind, " \"", spec.key, "\"")));
  if (!spec.children.empty() && spec.key != "SequentialLR" && spec.key != "ChainedScheduler") {
    return absl::InvalidArgumentError(
        absl::StrCat(kSchedulerKind, " \"", spec.key,
                     "\": only SequentialLR and ChainedScheduler compose `schedulers`"));
  }
  return (*factory)(optimizer, resolved, spec.children);
}

absl::StatusOr<std::unique_ptr<LrScheduler>> MakeScheduler(absl::string_view key,
                                                           torch::optim::Optimizer& optimizer,
                                                           const Kwargs& kwargs) {
  return MakeScheduler(SchedulerSpec{std::string(key), kwargs, {}}, optimizer);
}

}  // namespace kd
