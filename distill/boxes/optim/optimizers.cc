// The optimizers by torch's class names (torch::optim's SGD, Adam, AdamW, RMSprop, Adagrad) over
// parameter groups, and the optimizer registry.
#include <string>
#include <utility>
#include <vector>

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "distill/boxes/optim/composite_optimizer.h"
#include "distill/boxes/optim/optim.h"
#include "distill/config/kwargs.h"
#include "distill/config/plugin_kinds.h"

namespace kd {
namespace {

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
  torch::optim::SGDOptions options(NumberKwarg(kwargs, "lr"));
  options.momentum(NumberKwarg(kwargs, "momentum"))
      .dampening(NumberKwarg(kwargs, "dampening"))
      .weight_decay(NumberKwarg(kwargs, "weight_decay"))
      .nesterov(BoolKwarg(kwargs, "nesterov"));
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
    std::vector<ParamGroup> groups, const Kwargs& defaults) {
  return Build<Opt, Options>(std::move(groups), defaults,
                             [](const Kwargs& kwargs) -> absl::StatusOr<Options> {
                               Options options(NumberKwarg(kwargs, "lr"));
                               const std::vector<double> betas = NumberListKwarg(kwargs, "betas");
                               options.betas({betas.at(0), betas.at(1)})
                                   .eps(NumberKwarg(kwargs, "eps"))
                                   .weight_decay(NumberKwarg(kwargs, "weight_decay"))
                                   .amsgrad(BoolKwarg(kwargs, "amsgrad"));
                               return options;
                             });
}

KwargSpec WeightDecaySpec(const char* doc, double default_decay) {
  return {.name = "weight_decay",
          .type = KwargType::kNumber,
          .doc = doc,
          .default_value = default_decay,
          .min = 0};
}

std::vector<KwargSpec> AdamSpecs(const char* decay_doc, double default_decay) {
  return {PositiveNumberSpec("lr", "learning rate", 1e-3),
          {.name = "betas",
           .type = KwargType::kNumberList,
           .doc = "the running averages' coefficients (gradient, its square)",
           .default_value = std::vector<double>{0.9, 0.999},
           .min = 0,
           .max = 1,
           .max_exclusive = true},
          NonNegativeNumberSpec("eps", "denominator guard", 1e-8),
          WeightDecaySpec(decay_doc, default_decay),
          {.name = "amsgrad",
           .type = KwargType::kBool,
           .doc = "the AMSGrad variant",
           .default_value = false}};
}

KD_REGISTER(OptimizerRegistry(), "SGD", MakeSgd,
            {{.name = "lr",
              .type = KwargType::kNumber,
              .doc = "learning rate",
              .min = 0,
              .min_exclusive = true,
              .required = true},
             NonNegativeNumberSpec("momentum", "momentum factor", 0.0),
             NonNegativeNumberSpec("dampening", "dampening of the momentum", 0.0),
             WeightDecaySpec("L2 penalty", 0.0),
             {.name = "nesterov",
              .type = KwargType::kBool,
              .doc = "Nesterov momentum",
              .default_value = false}});
KD_REGISTER(OptimizerRegistry(), "Adam", ([](std::vector<ParamGroup> groups, const Kwargs& kwargs) {
              return MakeAdamLike<torch::optim::Adam, torch::optim::AdamOptions>(std::move(groups),
                                                                                 kwargs);
            }),
            AdamSpecs("L2 penalty", 0.0));
KD_REGISTER(OptimizerRegistry(), "AdamW",
            ([](std::vector<ParamGroup> groups, const Kwargs& kwargs) {
              return MakeAdamLike<torch::optim::AdamW, torch::optim::AdamWOptions>(
                  std::move(groups), kwargs);
            }),
            AdamSpecs("decoupled weight decay", 1e-2));

absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeRmsprop(std::vector<ParamGroup> groups,
                                                                     const Kwargs& defaults) {
  return Build<torch::optim::RMSprop, torch::optim::RMSpropOptions>(
      std::move(groups), defaults,
      [](const Kwargs& kwargs) -> absl::StatusOr<torch::optim::RMSpropOptions> {
        torch::optim::RMSpropOptions options(NumberKwarg(kwargs, "lr"));
        options.alpha(NumberKwarg(kwargs, "alpha"))
            .eps(NumberKwarg(kwargs, "eps"))
            .weight_decay(NumberKwarg(kwargs, "weight_decay"))
            .momentum(NumberKwarg(kwargs, "momentum"))
            .centered(BoolKwarg(kwargs, "centered"));
        return options;
      });
}

absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeAdagrad(std::vector<ParamGroup> groups,
                                                                     const Kwargs& defaults) {
  return Build<torch::optim::Adagrad, torch::optim::AdagradOptions>(
      std::move(groups), defaults,
      [](const Kwargs& kwargs) -> absl::StatusOr<torch::optim::AdagradOptions> {
        torch::optim::AdagradOptions options(NumberKwarg(kwargs, "lr"));
        options.lr_decay(NumberKwarg(kwargs, "lr_decay"))
            .weight_decay(NumberKwarg(kwargs, "weight_decay"))
            .initial_accumulator_value(NumberKwarg(kwargs, "initial_accumulator_value"))
            .eps(NumberKwarg(kwargs, "eps"));
        return options;
      });
}

KD_REGISTER(OptimizerRegistry(), "RMSprop", MakeRmsprop,
            {PositiveNumberSpec("lr", "learning rate", 1e-2),
             {.name = "alpha",
              .type = KwargType::kNumber,
              .doc = "the running average's coefficient (squared gradient)",
              .default_value = 0.99,
              .min = 0,
              .max = 1},
             NonNegativeNumberSpec("eps", "denominator guard", 1e-8),
             WeightDecaySpec("L2 penalty", 0.0),
             NonNegativeNumberSpec("momentum", "momentum factor", 0.0),
             {.name = "centered",
              .type = KwargType::kBool,
              .doc = "normalize by the gradient's estimated variance",
              .default_value = false}});
KD_REGISTER(OptimizerRegistry(), "Adagrad", MakeAdagrad,
            {PositiveNumberSpec("lr", "learning rate", 1e-2),
             NonNegativeNumberSpec("lr_decay", "the rate's decay per step", 0.0),
             WeightDecaySpec("L2 penalty", 0.0),
             NonNegativeNumberSpec("initial_accumulator_value",
                                   "the squared gradients' sum at the start", 0.0),
             NonNegativeNumberSpec("eps", "denominator guard", 1e-10)});

}  // namespace

Registry<OptimizerFactory>& OptimizerRegistry() {
  static Registry<OptimizerFactory>* const registry =
      NewGlobalRegistry<OptimizerFactory>(std::string(kOptimizerKind));
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
  KD_ASSIGN_OR_RETURN(const Kwargs resolved,
                      ResolvePluginKwargs(OptimizerRegistry(), key, kwargs, owner));
  absl::flat_hash_map<const c10::TensorImpl*, size_t> group_of;
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::string where = absl::StrCat(owner, ", parameter group ", i);
    if (groups.size() > 1 && groups[i].params.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": no trainable parameters (a frozen or parameter-free module?)"));
    }
    KD_RETURN_IF_ERROR(
        ResolvePluginKwargs(OptimizerRegistry(), key, MergeKwargs(kwargs, groups[i].kwargs), where)
            .status());
    for (const at::Tensor& p : groups[i].params) {
      if (auto [it, inserted] = group_of.try_emplace(p.unsafeGetTensorImpl(), i); !inserted) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": a parameter is also in group ", it->second,
                         " (torch's rule: each parameter in one group; narrow "
                         "the module paths)"));
      }
    }
  }
  return (*factory)(std::move(groups), resolved);
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
  if (dynamic_cast<const torch::optim::RMSprop*>(&optimizer) != nullptr) return "RMSprop";
  if (dynamic_cast<const torch::optim::Adagrad*>(&optimizer) != nullptr) return "Adagrad";
  if (const auto* composite = dynamic_cast<const CompositeOptimizer*>(&optimizer)) {
    std::vector<std::string> kinds;
    for (const CompositeOptimizer::Child& child : composite->children()) {
      kinds.push_back(absl::StrCat(child.name, ": ", OptimizerKind(*child.optimizer)));
    }
    return absl::StrCat("CompositeOptimizer(", absl::StrJoin(kinds, ", "), ")");
  }
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
