#include "distill/boxes/optim.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/ivalue_util.h"
#include "base/status_macros.h"
#include "distill/config/kwargs.h"
#include "distill/config/plugin_kinds.h"

namespace kd {
namespace {

double Number(const Kwargs& kwargs, const std::string& name, double fallback) {
  auto it = kwargs.find(name);
  if (it == kwargs.end() || it->second.isNone()) return fallback;
  return it->second.isInt() ? static_cast<double>(it->second.toInt()) : it->second.toDouble();
}

bool Bool(const Kwargs& kwargs, const std::string& name, bool fallback) {
  auto it = kwargs.find(name);
  return it == kwargs.end() || it->second.isNone() ? fallback : it->second.toBool();
}

std::string String(const Kwargs& kwargs, const std::string& name, const std::string& fallback) {
  auto it = kwargs.find(name);
  return it == kwargs.end() || it->second.isNone() ? fallback : it->second.toStringRef();
}

std::pair<double, double> Betas(const Kwargs& kwargs) {
  auto it = kwargs.find("betas");
  if (it == kwargs.end()) return {0.9, 0.999};
  const std::vector<double> b = it->second.toDoubleVector();
  return {b.at(0), b.at(1)};
}

// torch::optim's `Opt` over `groups`, each with its options made from the
// defaults merged with its own kwargs.
template <typename Opt, typename Options>
absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> Build(
    std::vector<ParamGroup> groups, const Kwargs& defaults,
    const std::function<absl::StatusOr<Options>(const Kwargs&)>& make_options) {
  KD_ASSIGN_OR_RETURN(Options base, make_options(defaults));
  std::vector<torch::optim::OptimizerParamGroup> torch_groups;
  for (ParamGroup& group : groups) {
    KD_ASSIGN_OR_RETURN(Options options, make_options(MergeKwargs(defaults, group.kwargs)));
    torch_groups.emplace_back(std::move(group.params), std::make_unique<Options>(options));
  }
  return std::unique_ptr<torch::optim::Optimizer>(
      std::make_unique<Opt>(std::move(torch_groups), base));
}

absl::StatusOr<torch::optim::SGDOptions> SgdOptions(const Kwargs& kwargs) {
  torch::optim::SGDOptions options(Number(kwargs, "lr", 0.1));
  options.momentum(Number(kwargs, "momentum", 0))
      .dampening(Number(kwargs, "dampening", 0))
      .weight_decay(Number(kwargs, "weight_decay", 0))
      .nesterov(Bool(kwargs, "nesterov", false));
  if (options.nesterov() && (options.momentum() <= 0 || options.dampening() != 0)) {
    return absl::InvalidArgumentError(
        "SGD: nesterov needs a momentum > 0 and zero dampening (torch's rule)");
  }
  return options;
}

absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeSgd(std::vector<ParamGroup> groups,
                                                                 const Kwargs& defaults) {
  return Build<torch::optim::SGD, torch::optim::SGDOptions>(std::move(groups), defaults,
                                                            SgdOptions);
}

template <typename Opt, typename Options>
absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeAdamLike(
    std::vector<ParamGroup> groups, const Kwargs& defaults, double default_decay) {
  return Build<Opt, Options>(std::move(groups), defaults,
                             [default_decay](const Kwargs& kwargs) -> absl::StatusOr<Options> {
                               Options options(Number(kwargs, "lr", 1e-3));
                               const auto [b1, b2] = Betas(kwargs);
                               options.betas({b1, b2})
                                   .eps(Number(kwargs, "eps", 1e-8))
                                   .weight_decay(Number(kwargs, "weight_decay", default_decay))
                                   .amsgrad(Bool(kwargs, "amsgrad", false));
                               return options;
                             });
}

const KwargSpec kLr = {.name = "lr",
                       .type = KwargType::kNumber,
                       .doc = "learning rate",
                       .min = 0,
                       .min_exclusive = true};
const KwargSpec kWeightDecay = {.name = "weight_decay",
                                .type = KwargType::kNumber,
                                .doc = "L2 penalty (AdamW: decoupled)",
                                .min = 0};

std::vector<KwargSpec> AdamSpecs(const char* decay_doc) {
  KwargSpec decay = kWeightDecay;
  decay.doc = decay_doc;
  return {
      {.name = "lr", .type = KwargType::kNumber, .doc = "1e-3", .min = 0, .min_exclusive = true},
      {.name = "betas",
       .type = KwargType::kNumberList,
       .doc = "[0.9, 0.999]",
       .min = 0,
       .max = 1,
       .max_exclusive = true},
      {.name = "eps", .type = KwargType::kNumber, .doc = "1e-8", .min = 0},
      decay,
      {.name = "amsgrad", .type = KwargType::kBool, .doc = "false"}};
}

KD_REGISTER(OptimizerRegistry(), "SGD", MakeSgd,
            {{.name = "lr",
              .type = KwargType::kNumber,
              .doc = "learning rate",
              .min = 0,
              .min_exclusive = true,
              .required = true},
             {.name = "momentum", .type = KwargType::kNumber, .doc = "0", .min = 0},
             {.name = "dampening", .type = KwargType::kNumber, .doc = "0", .min = 0},
             kWeightDecay,
             {.name = "nesterov", .type = KwargType::kBool, .doc = "false"}});
KD_REGISTER(OptimizerRegistry(), "Adam", ([](std::vector<ParamGroup> groups, const Kwargs& kwargs) {
              return MakeAdamLike<torch::optim::Adam, torch::optim::AdamOptions>(std::move(groups),
                                                                                 kwargs, 0.0);
            }),
            AdamSpecs("L2 penalty; 0"));
KD_REGISTER(OptimizerRegistry(), "AdamW",
            ([](std::vector<ParamGroup> groups, const Kwargs& kwargs) {
              return MakeAdamLike<torch::optim::AdamW, torch::optim::AdamWOptions>(
                  std::move(groups), kwargs, 1e-2);
            }),
            AdamSpecs("decoupled weight decay; 1e-2"));

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
        max_(String(kwargs, "mode", "min") == "max"),
        rel_(String(kwargs, "threshold_mode", "rel") == "rel"),
        factor_(Number(kwargs, "factor", 0.1)),
        threshold_(Number(kwargs, "threshold", 1e-4)),
        min_lr_(Number(kwargs, "min_lr", 0)),
        eps_(Number(kwargs, "eps", 1e-8)),
        patience_(static_cast<int64_t>(Number(kwargs, "patience", 10))),
        cooldown_(static_cast<int64_t>(Number(kwargs, "cooldown", 0))),
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
  const int64_t step = kwargs.at("step_size").toInt();
  const double gamma = Number(kwargs, "gamma", 0.1);
  return Factor(optimizer, [=](int64_t e) { return std::pow(gamma, e / step); });
}

absl::StatusOr<std::unique_ptr<LrScheduler>> MakeMultiStepLr(torch::optim::Optimizer& optimizer,
                                                             const Kwargs& kwargs) {
  const std::vector<int64_t> milestones = kwargs.at("milestones").toIntVector();
  const double gamma = Number(kwargs, "gamma", 0.1);
  return Factor(optimizer, [=](int64_t e) {
    const auto passed =
        std::count_if(milestones.begin(), milestones.end(), [e](int64_t m) { return m <= e; });
    return std::pow(gamma, static_cast<double>(passed));
  });
}

absl::StatusOr<std::unique_ptr<LrScheduler>> MakeLinearLr(torch::optim::Optimizer& optimizer,
                                                          const Kwargs& kwargs) {
  const double start = Number(kwargs, "start_factor", 1.0 / 3);
  const double end = Number(kwargs, "end_factor", 1.0);
  const int64_t total = static_cast<int64_t>(Number(kwargs, "total_iters", 5));
  return Factor(optimizer, [=](int64_t e) {
    return start +
           (end - start) * static_cast<double>(std::min(e, total)) / static_cast<double>(total);
  });
}

const KwargSpec kGamma = {.name = "gamma", .type = KwargType::kNumber, .doc = "0.1", .min = 0};

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
              const double t_max = Number(kwargs, "T_max", 1),
                           eta_min = Number(kwargs, "eta_min", 0);
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
             {.name = "eta_min", .type = KwargType::kNumber, .doc = "0", .min = 0}});
KD_REGISTER(SchedulerRegistry(), "LinearLR", MakeLinearLr,
            {{.name = "start_factor",
              .type = KwargType::kNumber,
              .doc = "1/3",
              .min = 0,
              .max = 1,
              .min_exclusive = true},
             {.name = "end_factor", .type = KwargType::kNumber, .doc = "1", .min = 0, .max = 1},
             {.name = "total_iters", .type = KwargType::kInteger, .doc = "5", .min = 1}});
KD_REGISTER(SchedulerRegistry(), "ReduceLROnPlateau",
            ([](torch::optim::Optimizer& optimizer,
                const Kwargs& kwargs) -> absl::StatusOr<std::unique_ptr<LrScheduler>> {
              return std::unique_ptr<LrScheduler>(
                  std::make_unique<PlateauScheduler>(optimizer, kwargs));
            }),
            {{.name = "mode",
              .type = KwargType::kString,
              .doc = "min (default) or max",
              .choices = {"min", "max"}},
             {.name = "factor",
              .type = KwargType::kNumber,
              .doc = "0.1",
              .min = 0,
              .max = 1,
              .max_exclusive = true},
             {.name = "patience", .type = KwargType::kInteger, .doc = "10", .min = 0},
             {.name = "threshold", .type = KwargType::kNumber, .doc = "1e-4", .min = 0},
             {.name = "threshold_mode",
              .type = KwargType::kString,
              .doc = "rel (default) or abs",
              .choices = {"rel", "abs"}},
             {.name = "cooldown", .type = KwargType::kInteger, .doc = "0", .min = 0},
             {.name = "min_lr", .type = KwargType::kNumber, .doc = "0", .min = 0},
             {.name = "eps", .type = KwargType::kNumber, .doc = "1e-8", .min = 0}});

}  // namespace

Registry<OptimizerFactory>& OptimizerRegistry() {
  static Registry<OptimizerFactory>* const registry =
      NewGlobalRegistry<OptimizerFactory>(std::string(kOptimizerKind));
  return *registry;
}

Registry<SchedulerFactory>& SchedulerRegistry() {
  static Registry<SchedulerFactory>* const registry =
      NewGlobalRegistry<SchedulerFactory>(std::string(kSchedulerKind));
  return *registry;
}

absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(
    absl::string_view key, std::vector<at::Tensor> params, const Kwargs& kwargs) {
  std::vector<ParamGroup> groups(1);
  groups[0].params = std::move(params);
  return MakeOptimizer(key, std::move(groups), kwargs);
}

absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(
    absl::string_view key, std::vector<ParamGroup> groups, const Kwargs& kwargs) {
  KD_ASSIGN_OR_RETURN(const OptimizerFactory* factory, OptimizerRegistry().Get(key));
  const std::string owner = absl::StrCat(kOptimizerKind, " \"", key, "\"");
  KD_RETURN_IF_ERROR(CheckPluginKwargValues(OptimizerRegistry(), key, kwargs, owner));
  absl::flat_hash_map<const c10::TensorImpl*, size_t> group_of;
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::string where = absl::StrCat(owner, ", parameter group ", i);
    if (groups.size() > 1 && groups[i].params.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": no trainable parameters (a frozen or parameter-free module?)"));
    }
    KD_RETURN_IF_ERROR(CheckPluginKwargValues(OptimizerRegistry(), key,
                                              MergeKwargs(kwargs, groups[i].kwargs), where));
    for (const at::Tensor& p : groups[i].params) {
      if (auto [it, inserted] = group_of.try_emplace(p.unsafeGetTensorImpl(), i); !inserted) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": a parameter is also in group ", it->second,
                         " (torch's rule: each parameter in one group; narrow "
                         "the module paths)"));
      }
    }
  }
  return (*factory)(std::move(groups), kwargs);
}

absl::StatusOr<std::unique_ptr<LrScheduler>> MakeScheduler(absl::string_view key,
                                                           torch::optim::Optimizer& optimizer,
                                                           const Kwargs& kwargs) {
  KD_ASSIGN_OR_RETURN(const SchedulerFactory* factory, SchedulerRegistry().Get(key));
  KD_RETURN_IF_ERROR(CheckPluginKwargValues(SchedulerRegistry(), key, kwargs,
                                            absl::StrCat(kSchedulerKind, " \"", key, "\"")));
  return (*factory)(optimizer, kwargs);
}

std::vector<double> LearningRates(const torch::optim::Optimizer& optimizer) {
  std::vector<double> lrs;
  for (const auto& group : optimizer.param_groups()) lrs.push_back(group.options().get_lr());
  return lrs;
}

std::string OptimizerKind(const torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer) != nullptr) return "SGD";
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer) != nullptr) return "AdamW";
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer) != nullptr) return "Adam";
  return "other";
}

std::vector<int64_t> ParamGroupSizes(const torch::optim::Optimizer& optimizer) {
  std::vector<int64_t> sizes;
  for (const auto& group : optimizer.param_groups()) {
    sizes.push_back(static_cast<int64_t>(group.params().size()));
  }
  return sizes;
}

}  // namespace kd
