#include "distill/config/internal/stage_checks.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/module_path.h"
#include "base/nearest.h"
#include "base/registry.h"
#include "distill/config/kwargs.h"
#include "distill/config/plugin_kinds.h"
#include "distill/config/proc_fields.h"

namespace kd {
namespace config_internal {

void StageChecker::CheckStageModel(const StageModelConfig& model, const ConfigLocator& loc,
                                   IoRef::Source role, const StageContext& context) {
  if (model.has_forward_proc()) {
    CheckPlugin(kForwardProcKind, model.forward_proc().key(), model.forward_proc().kwargs(),
                loc.Nested("forward_proc"));
  }
  std::map<std::string, TextPosition> hooked;
  for (int i = 0; i < model.forward_hooks_size(); ++i) {
    const ForwardHookConfig& hook = model.forward_hooks(i);
    const ConfigLocator hloc = loc.Nested("forward_hooks", i);
    const std::string quoted = QuoteName(hook.module_path());
    if (const std::string problem = ModulePathProblem(hook.module_path()); !problem.empty()) {
      Add(hloc.Of("module_path"), problem);
    }
    if (auto [it, inserted] = hooked.try_emplace(hook.module_path(), hloc.self()); !inserted) {
      Add(hloc.self(), absl::StrCat("duplicate forward hook on module ", quoted, " (first at ",
                                    it->second.ToString(), ")"));
    }
    if (!hook.requires_input() && !hook.requires_output()) {
      Add(hloc.self(), absl::StrCat("forward hook on module ", quoted,
                                    " records nothing: set requires_input or requires_output"));
    }
    if (hook.stacks_accumulated() && !hook.accumulates()) {
      Add(hloc.Of("stacks_accumulated"), "stacks_accumulated needs accumulates");
    }
  }
  std::set<std::string> frozen;
  for (int i = 0; i < model.frozen_modules_size(); ++i) {
    if (const std::string problem = ModulePathProblem(model.frozen_modules(i)); !problem.empty()) {
      Add(loc.Of("frozen_modules", i), problem);
    }
    if (!frozen.insert(model.frozen_modules(i)).second) {
      Add(loc.Of("frozen_modules", i),
          absl::StrCat("duplicate frozen module ", QuoteName(model.frozen_modules(i))));
    }
  }
  std::set<std::string> chained;
  for (int i = 0; i < model.sequential_size(); ++i) {
    const std::string& path = model.sequential(i);
    if (!path.empty() && path[0] == '+') {
      Add(loc.Of("sequential", i),
          absl::StrCat("torchdistill's adaptation layers (", QuoteName(path),
                       ") are not supported in sequential: add the layer as one of this "
                       "model's auxiliary_modules on the recorded value it adapts"));
    } else if (path.empty()) {
      Add(loc.Of("sequential", i),
          "\"\" is the whole model, not a module of it: leave sequential empty to run the "
          "whole model");
    } else if (const std::string problem = ModulePathProblem(path); !problem.empty()) {
      Add(loc.Of("sequential", i), problem);
    } else if (!chained.insert(path).second) {
      Add(loc.Of("sequential", i), absl::StrCat("duplicate sequential module ", QuoteName(path)));
    }
  }
  if (model.find_unused_parameters() &&
      model.wrapper() != StageModelConfig::DISTRIBUTED_DATA_PARALLEL) {
    Add(loc.Of("find_unused_parameters"),
        "find_unused_parameters needs wrapper: DISTRIBUTED_DATA_PARALLEL");
  }
  std::set<std::string> aux_names;
  for (int i = 0; i < model.auxiliary_modules_size(); ++i) {
    const AuxiliaryModuleConfig& aux = model.auxiliary_modules(i);
    const ConfigLocator aloc = loc.Nested("auxiliary_modules", i);
    if (aux.name().empty()) {
      Missing(aloc, "name");
    } else if (!aux_names.insert(aux.name()).second) {
      Add(aloc.Of("name"), absl::StrCat("duplicate auxiliary module \"", aux.name(), "\""));
    } else if (hooked.count(aux.name()) > 0) {
      Add(aloc.Of("name"), absl::StrCat("auxiliary module \"", aux.name(),
                                        "\" has the path of a hooked module; rename it"));
    }
    CheckPlugin(kAuxiliaryModuleKind, aux.key(), aux.kwargs(), aloc);
    if (!aux.has_input()) {
      Missing(aloc, "input");
      continue;
    }
    CheckAuxInput(aux.input(), aloc.Nested("input"), role, i, model, context);
    if (aux.extra_inputs_size() > 2) {
      Add(aloc.Of("extra_inputs", 2), "an auxiliary module takes at most three inputs");
    }
    for (int j = 0; j < aux.extra_inputs_size(); ++j) {
      CheckAuxInput(aux.extra_inputs(j), aloc.Nested("extra_inputs", j), role, i, model, context);
    }
  }
}

void StageChecker::CheckAuxInput(const IoRef& ref, const ConfigLocator& loc, IoRef::Source role,
                                 int index, const StageModelConfig& model,
                                 const StageContext& context) {
  if (ref.source() != IoRef::SOURCE_UNSPECIFIED && ref.source() != role) {
    Add(loc.Of("source"),
        absl::StrCat("an auxiliary module of the ", RoleName(role), " reads the ", RoleName(role),
                     "'s values: source ", IoRef::Source_Name(role)));
    return;
  }
  // Modules run in their order: one reads what an earlier one recorded, not a later one.
  for (int k = index; k < model.auxiliary_modules_size(); ++k) {
    if (ref.io() == IoRef::OUTPUT && model.auxiliary_modules(k).name() == ref.path()) {
      Add(loc.Of("path"),
          absl::StrCat("auxiliary module \"", ref.path(), "\" ",
                       k == index ? "is this one" : "runs after this one",
                       ": an auxiliary module reads the outputs of those listed before it"));
      return;
    }
  }
  IoRef own = ref;  // the model's own value, whether or not `source` says so
  own.set_source(role);
  CheckIoRef(own, loc, context, /*loss_input=*/false);
}

void StageChecker::CheckIoRef(const IoRef& ref, const ConfigLocator& loc,
                              const StageContext& context, bool loss_input) {
  if (ref.source() == IoRef::SOURCE_UNSPECIFIED) {
    Missing(loc, "source");
    return;
  }
  if (ref.has_element()) {
    if (ref.source() == IoRef::TARGETS || ref.source() == IoRef::BATCH ||
        ref.io() == IoRef::PARAMETER) {
      Add(loc.Of("element"), "element picks a value of a recorded tuple or list: not here");
    }
    AtLeast(loc, "element", ref.element(), 0);
  }
  if (!ref.key().empty() && (ref.source() == IoRef::TARGETS || ref.source() == IoRef::BATCH ||
                             ref.io() == IoRef::PARAMETER)) {
    Add(loc.Of("key"), "key picks an entry of a recorded dict: not here");
  }
  if (ref.source() == IoRef::BATCH) {
    if (!loss_input) {
      Add(loc.Of("source"), "an auxiliary module reads a model's values, not the batch's");
    } else if (ref.path().empty()) {
      Missing(loc, "path", " (the batch's supplementary key, e.g. \"indices\")");
    } else if (ref.io() != IoRef::OUTPUT) {
      Add(loc.Of("io"), "a BATCH input has no io");
    }
    return;
  }
  if (ref.source() == IoRef::TARGETS) {
    if (!loss_input) {
      Add(loc.Of("source"), "an auxiliary module reads a model's values, not the targets");
    } else if (!ref.path().empty() || ref.io() != IoRef::OUTPUT) {
      Add(loc.Of(ref.path().empty() ? "io" : "path"), "a TARGETS input has no path or io");
    }
    return;
  }
  const RecordedIo* recorded = ref.source() == IoRef::TEACHER ? context.teacher : context.student;
  if (recorded == nullptr) {
    Add(loc.Of("source"),
        "reads the teacher, but the run has none (DistillConfig.teacher is unset)");
    return;
  }
  if (ref.io() == IoRef::PARAMETER) {
    // Checked against the model when it is loaded (the names with the nearest existing).
    if (!loss_input) {
      Add(loc.Of("io"), "an auxiliary module reads recorded values, not parameters");
    } else if (ref.path().empty()) {
      Missing(loc, "path", " (the parameter's or buffer's name, e.g. \"fc.weight\")");
    }
    return;
  }
  if (recorded->Has(ref.path(), ref.io())) return;
  const char* io = ref.io() == IoRef::INPUT ? "input" : "output";
  std::string message =
      absl::StrCat("the ", RoleName(ref.source()), "'s io[", QuoteName(ref.path()), "][\"", io,
                   "\"] is not recorded in this stage");
  const std::string suggestion = DidYouMean(ref.path(), recorded->Paths(ref.io()));
  if (!suggestion.empty() && !ref.path().empty()) {
    absl::StrAppend(&message, "; ", suggestion);
  } else {
    absl::StrAppend(&message, ": add forward_hooks { module_path: \"", ref.path(), "\" requires_",
                    io, ": true } to the stage's ", RoleName(ref.source()));
  }
  Add(loc.Written("path") ? loc.Of("path") : loc.self(), message);
}

void StageChecker::CheckCriterion(const CriterionConfig& criterion, const ConfigLocator& loc,
                                  const StageContext& context) {
  if (criterion.terms().empty()) Missing(loc, "terms", " (at least one term)");
  std::set<std::string> groups;
  for (int i = 0; i < criterion.groups_size(); ++i) {
    const LossGroupConfig& group = criterion.groups(i);
    if (group.name().empty()) Missing(loc.Nested("groups", i), "name");
    if (!groups.insert(group.name()).second) {
      Add(loc.Nested("groups", i).Of("name"),
          absl::StrCat("duplicate group name \"", group.name(), "\""));
    }
    if (group.has_weight() && !std::isfinite(group.weight())) {
      Add(loc.Nested("groups", i).Of("weight"), "the weight must be finite");
    }
  }
  std::map<std::string, TextPosition> names;
  for (int i = 0; i < criterion.terms_size(); ++i) {
    const LossTermConfig& term = criterion.terms(i);
    const ConfigLocator tloc = loc.Nested("terms", i);
    CheckPlugin(kLossKind, term.key(), term.kwargs(), tloc);
    const std::string name = term.name().empty() ? term.key() : term.name();
    const TextPosition name_at = tloc.Of(term.name().empty() ? "key" : "name");
    if (auto [it, inserted] = names.try_emplace(name, name_at); !inserted && !name.empty()) {
      Add(name_at, absl::StrCat("duplicate term name \"", name, "\" (first at ",
                                it->second.ToString(), "); give the terms distinct names"));
    }
    if (term.inputs().empty()) Missing(tloc, "inputs", " (at least one)");
    if (!term.group().empty() && groups.count(term.group()) == 0) {
      Add(tloc.Of("group"), absl::StrCat("group \"", term.group(),
                                         "\" is not in the criterion's groups; add it there"));
    }
    AtLeast(tloc, "warmup_epochs", term.warmup_epochs(), 0);
    std::set<std::string> args;
    for (int j = 0; j < term.inputs_size(); ++j) {
      const IoRef& input = term.inputs(j);
      const ConfigLocator iloc = tloc.Nested("inputs", j);
      if (input.arg().empty()) {
        Missing(iloc, "arg");
      } else if (!args.insert(input.arg()).second) {
        Add(iloc.Of("arg"),
            absl::StrCat("duplicate input arg \"", input.arg(), "\" in term \"", name, "\""));
      }
      CheckIoRef(input, iloc, context, /*loss_input=*/true);
    }
  }
}

void StageChecker::CheckOptimizer(const OptimizerConfig& optimizer, const ConfigLocator& loc,
                                  const StageContext& context) {
  CheckPlugin(kOptimizerKind, optimizer.key(), optimizer.kwargs(), loc);
  const RegistryBase* registry = FindRegistry(kOptimizerKind);
  std::optional<std::vector<KwargSpec>> specs =
      registry != nullptr ? registry->KwargSpecs(optimizer.key()) : std::nullopt;
  // A group's kwargs override the optimizer's: none is required there.
  if (specs.has_value()) {
    for (KwargSpec& spec : *specs) spec.required = false;
  }
  for (int i = 0; i < optimizer.param_groups_size(); ++i) {
    const ParamGroupConfig& group = optimizer.param_groups(i);
    const ConfigLocator gloc = loc.Nested("param_groups", i);
    if (group.model() == ParamGroupConfig::TEACHER && !context.has_teacher) {
      Add(gloc.Of("model"), "a parameter group of the teacher, but the run has none");
    }
    CheckKwargList(group.kwargs(), specs,
                   absl::StrCat(kOptimizerKind, " \"", optimizer.key(), "\""), gloc, "kwargs");
  }
  if (optimizer.has_max_grad_norm() && optimizer.max_grad_norm() <= 0) {  // NaN: not finite
    Add(loc.Of("max_grad_norm"),
        absl::StrCat("max_grad_norm must be > 0, got ", optimizer.max_grad_norm()));
  }
  AtLeast(loc, "grad_accum_step", optimizer.grad_accum_step(), 0);
}

void StageChecker::CheckScheduler(const SchedulerConfig& scheduler, const ConfigLocator& loc,
                                  bool nested) {
  CheckPlugin(kSchedulerKind, scheduler.key(), scheduler.kwargs(), loc);
  const bool composes = scheduler.key() == "SequentialLR" || scheduler.key() == "ChainedScheduler";
  if (composes && scheduler.schedulers().empty()) {
    Missing(loc, "schedulers",
            absl::StrCat(" (the schedulers ", scheduler.key(), " composes, in order)"));
  } else if (!composes && !scheduler.schedulers().empty()) {
    Add(loc.Of("schedulers", 0), absl::StrCat("scheduler \"", scheduler.key(),
                                              "\" composes no schedulers (only SequentialLR and "
                                              "ChainedScheduler do): leave `schedulers` out"));
  }
  if (nested && scheduler.scheduling_step() != 0) {
    Add(loc.Of("scheduling_step"),
        "a composed scheduler steps with its SequentialLR or ChainedScheduler: leave "
        "scheduling_step out here");
  }
  for (int i = 0; i < scheduler.schedulers_size(); ++i) {
    CheckScheduler(scheduler.schedulers(i), loc.Nested("schedulers", i), /*nested=*/true);
  }
}

void StageChecker::WarnIfValidatingOnTestData(const DistillConfig& config, const LoaderConfig& val,
                                              const ConfigLocator& loc) {
  std::string why;
  if (config.has_test_data_loader() && config.test_data_loader().dataset_id() == val.dataset_id()) {
    why = "the dataset test_data_loader reads too";
  }
  for (const DatasetConfig& dataset : config.datasets()) {
    if (dataset.id() != val.dataset_id() || !why.empty()) continue;
    for (const Kwarg& kwarg : dataset.kwargs()) {
      if (kwarg.name() == "split" && kwarg.str() == "test") why = "a test split";
    }
  }
  if (why.empty()) return;
  Warn(loc.Of("dataset_id"),
       absl::StrCat("validation reads \"", val.dataset_id(), "\", ", why,
                    ": the best checkpoint (and early stopping) is then chosen on the test data; "
                    "validate on data held out of the training split (a dataset's subset)"));
}

void StageChecker::CheckFrozenTeacher(const StageConfig& stage, const ConfigLocator& loc,
                                      absl::string_view why, bool hooks_below_output) {
  const std::string kWhy(why);
  const StageModelConfig& teacher = stage.teacher();
  const ConfigLocator tloc = loc.Nested("teacher");
  for (int i = 0; !hooks_below_output && i < teacher.forward_hooks_size(); ++i) {
    const std::string& path = teacher.forward_hooks(i).module_path();
    if (path.empty()) continue;
    Add(tloc.Nested("forward_hooks", i).Of("module_path"),
        absl::StrCat(kWhy, ": only its output (module_path \"\") can be hooked, not ",
                     QuoteName(path), "; drop the hook or optimize_for_inference"));
  }
  if (teacher.has_requires_grad() && teacher.requires_grad()) {
    Add(tloc.Of("requires_grad"), absl::StrCat(kWhy, ": it cannot train"));
  }
  if (teacher.sequential_size() > 0) {
    Add(tloc.Of("sequential", 0), absl::StrCat(kWhy, ": it runs whole"));
  }
  if (!teacher.frozen_modules().empty()) {
    Add(tloc.Of("frozen_modules", 0), absl::StrCat(kWhy, ": it has no modules to freeze"));
  }
  if (teacher.wrapper() != StageModelConfig::NO_WRAPPER) {
    Add(tloc.Of("wrapper"), absl::StrCat(kWhy, ": it is not wrapped"));
  }
  const OptimizerConfig& optimizer = stage.optimizer();
  for (int i = 0; i < optimizer.param_groups_size(); ++i) {
    if (optimizer.param_groups(i).model() == ParamGroupConfig::TEACHER) {
      Add(loc.Nested("optimizer").Nested("param_groups", i).Of("model"),
          absl::StrCat(kWhy, ": it has no parameters to optimize"));
    }
  }
}

void StageChecker::CheckStageProcs(const StageConfig& stage, const ConfigLocator& loc) {
  const std::pair<absl::string_view, absl::string_view> procs[] = {
      {kPreEpochProcKind, kPreEpochProcDeprecated},
      {kPreForwardProcKind, kPreForwardProcDeprecated},
      {kPostForwardProcKind, kPostForwardProcDeprecated},
      {kPostEpochProcKind, kPostEpochProcDeprecated},
  };
  for (const auto& [name, deprecated] : procs) {
    absl::StatusOr<const PluginConfig*> config = GetProcConfig(stage, name);
    if (!config.ok()) {
      Add(loc.Of(deprecated), std::string(config.status().message()));
      continue;
    }
    if (*config == nullptr) continue;
    const absl::string_view field = loc.Written(name) ? name : deprecated;
    if (field == deprecated) {
      Warn(loc.Of(deprecated),
           absl::StrCat("\"", deprecated, "\" is deprecated; call it \"", name, "\""));
    }
    CheckPlugin(name, (*config)->key(), (*config)->kwargs(), loc.Nested(field));
  }
}

}  // namespace config_internal
}  // namespace kd
