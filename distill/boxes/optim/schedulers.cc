// The learning-rate schedulers by torch's names: closed forms of StepLR, MultiStepLR,
// CosineAnnealingLR and LinearLR, and ReduceLROnPlateau's state machine.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include <torch/optim/optimizer.h>

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
  ClosedFormScheduler(torch::optim::Optimizer& optimizer, Rate rate)
      : optimizer_(optimizer), base_(LearningRates(optimizer)), rate_(std::move(rate)) {
    Apply();
  }
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
  int64_t epoch_ = 0;
};

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

// base * factor(epoch).
std::unique_ptr<LrScheduler> Factor(torch::optim::Optimizer& optimizer,
                                    std::function<double(int64_t)> factor) {
  return std::make_unique<ClosedFormScheduler>(
      optimizer, [factor = std::move(factor)](double base, int64_t e) { return base * factor(e); });
}

absl::StatusOr<std::unique_ptr<LrScheduler>> MakeStepLr(torch::optim::Optimizer& optimizer,
                                                        const Kwargs& kwargs) {
  const int64_t step = IntKwarg(kwargs, "step_size");
  const double gamma = NumberKwarg(kwargs, "gamma");
  return Factor(optimizer, [=](int64_t e) { return std::pow(gamma, e / step); });
}

absl::StatusOr<std::unique_ptr<LrScheduler>> MakeMultiStepLr(torch::optim::Optimizer& optimizer,
                                                             const Kwargs& kwargs) {
  const std::vector<int64_t> milestones = IntListKwarg(kwargs, "milestones");
  const double gamma = NumberKwarg(kwargs, "gamma");
  return Factor(optimizer, [=](int64_t e) {
    const auto passed =
        std::count_if(milestones.begin(), milestones.end(), [e](int64_t m) { return m <= e; });
    return std::pow(gamma, static_cast<double>(passed));
  });
}

absl::StatusOr<std::unique_ptr<LrScheduler>> MakeLinearLr(torch::optim::Optimizer& optimizer,
                                                          const Kwargs& kwargs) {
  const double start = NumberKwarg(kwargs, "start_factor");
  const double end = NumberKwarg(kwargs, "end_factor");
  const int64_t total = IntKwarg(kwargs, "total_iters");
  return Factor(optimizer, [=](int64_t e) {
    return start +
           (end - start) * static_cast<double>(std::min(e, total)) / static_cast<double>(total);
  });
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
            ([](torch::optim::Optimizer& optimizer,
                const Kwargs& kwargs) -> absl::StatusOr<std::unique_ptr<LrScheduler>> {
              const double t_max = NumberKwarg(kwargs, "T_max"),
                           eta_min = NumberKwarg(kwargs, "eta_min");
              return std::unique_ptr<LrScheduler>(
                  std::make_unique<ClosedFormScheduler>(optimizer, [=](double base, int64_t e) {
                    return eta_min + (base - eta_min) *
                                         (1 + std::cos(M_PI * static_cast<double>(e) / t_max)) / 2;
                  }));
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
    ([](torch::optim::Optimizer& optimizer,
        const Kwargs& kwargs) -> absl::StatusOr<std::unique_ptr<LrScheduler>> {
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

Registry<SchedulerFactory>& SchedulerRegistry() {
  static Registry<SchedulerFactory>* const registry =
      NewGlobalRegistry<SchedulerFactory>(std::string(kSchedulerKind));
  return *registry;
}

absl::StatusOr<std::unique_ptr<LrScheduler>> MakeScheduler(absl::string_view key,
                                                           torch::optim::Optimizer& optimizer,
                                                           const Kwargs& kwargs) {
  KD_ASSIGN_OR_RETURN(const SchedulerFactory* factory, SchedulerRegistry().Get(key));
  KD_ASSIGN_OR_RETURN(const Kwargs resolved,
                      ResolvePluginKwargs(SchedulerRegistry(), key, kwargs,
                                          absl::StrCat(kSchedulerKind, " \"", key, "\"")));
  return (*factory)(optimizer, resolved);
}

}  // namespace kd
