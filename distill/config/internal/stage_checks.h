// The checks of one stage's parts that read what the stage records: a model's hooks, frozen and
// auxiliary modules (and what those read), the loss terms' inputs, the optimizer's parameter
// groups. The walk over a config's sections stays in config_validator.cc; the generic checks
// (positions, bounds, plugins) come from Checker.
#ifndef LIBKD_DISTILL_CONFIG_INTERNAL_STAGE_CHECKS_H_
#define LIBKD_DISTILL_CONFIG_INTERNAL_STAGE_CHECKS_H_

#include "absl/strings/string_view.h"
#include "distill/config/config_loader.h"
#include "distill/config/distill_config.pb.h"
#include "distill/config/internal/checker.h"
#include "distill/config/internal/stage_io.h"

namespace kd {
namespace config_internal {

class StageChecker : public Checker {
 public:
  using Checker::Checker;

  // The stage's teacher or student (`role`): forward_proc, forward_hooks (paths, duplicates,
  // something recorded), frozen_modules, the DDP-only flags, auxiliary modules and their input.
  void CheckStageModel(const StageModelConfig& model, const ConfigLocator& loc, IoRef::Source role,
                       const StageContext& context);
  // The loss terms: plugins, distinct names, their inputs recorded in this stage.
  void CheckCriterion(const CriterionConfig& criterion, const ConfigLocator& loc,
                      const StageContext& context);
  // The optimizer's plugin, its parameter groups (their kwargs as the optimizer's, none required)
  // and its numbers.
  // The stage's process functions: each under its name or its deprecated long name (a
  // warning), its key and kwargs checked.
  void CheckStageProcs(const StageConfig& stage, const ConfigLocator& loc);
  void CheckOptimizer(const OptimizerConfig& optimizer, const ConfigLocator& loc,
                      const StageContext& context);
  // A scheduler, and those SequentialLR and ChainedScheduler compose (`nested`: one of them).
  void CheckScheduler(const SchedulerConfig& scheduler, const ConfigLocator& loc, bool nested);
  // A stage of a run whose teacher has no parameters (ModelConfig.optimize_for_inference, an
  // AOTInductor package; `why` says which): the stage's teacher (at `loc`, the stage) may not
  // train, take frozen modules, a `sequential` chain or a wrapper, nor the optimizer a teacher
  // parameter group; unless `hooks_below_output`, it may be hooked at its output only.
  // (Auxiliary modules may read what it records.)
  // A warning where a stage's val_data_loader reads test data (the dataset test_data_loader
  // reads, or a test split): what the run chooses on validation (its best checkpoint, early
  // stopping) is then chosen on the data its final figures come from.
  void WarnIfValidatingOnTestData(const DistillConfig& config, const LoaderConfig& val,
                                  const ConfigLocator& loc);
  void CheckFrozenTeacher(const StageConfig& stage, const ConfigLocator& loc, absl::string_view why,
                          bool hooks_below_output);

 private:
  // A value read by a loss term (`loss_input`) or an auxiliary module.
  void CheckIoRef(const IoRef& ref, const ConfigLocator& loc, const StageContext& context,
                  bool loss_input);
  // An input of `model`'s auxiliary module `index`: the model's own value (`role`), recorded
  // by a hook or by an auxiliary module listed before it.
  void CheckAuxInput(const IoRef& ref, const ConfigLocator& loc, IoRef::Source role, int index,
                     const StageModelConfig& model, const StageContext& context);
};

}  // namespace config_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_CONFIG_INTERNAL_STAGE_CHECKS_H_
