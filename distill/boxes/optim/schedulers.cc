// The learning-rate schedulers by torch's names that are closed forms of the period: StepLR,
// MultiStepLR, ExponentialLR, ConstantLR, LinearLR, PolynomialLR, CosineAnnealingLR,
// CosineAnnealingWarmRestarts, LambdaLR (a registered function) and torchdistill's
// poly_lr_scheduler; and the scheduler registry. ReduceLROnPlateau: plateau_scheduler.cc;
// OneCycleLR: one_cycle_scheduler.cc; SequentialLR and ChainedScheduler: composed_schedulers.cc.
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
#include "distill/config/plugin_kinds.h"

namespace kd {
namespace {

using optim_internal::Children;
using optim_internal::ClosedFormScheduler;
using optim_internal::Factor;

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
