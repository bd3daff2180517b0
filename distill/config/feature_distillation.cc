#include "distill/config/feature_distillation.h"

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "distill/config/create_alignments.h"

namespace kd {
namespace {

// The hook of `config` on `path` (added if there is none) records the side `io` reads.
void Hook(StageModelConfig& config, const IoRef& ref) {
  ForwardHookConfig* hook = nullptr;
  for (ForwardHookConfig& existing : *config.mutable_forward_hooks()) {
    if (existing.module_path() == ref.path()) hook = &existing;
  }
  if (hook == nullptr) {
    hook = config.add_forward_hooks();
    hook->set_module_path(ref.path());
  }
  if (ref.io() == IoRef::INPUT) {
    hook->set_requires_input(true);
  } else {
    hook->set_requires_output(true);
  }
}

// `ref` as a loss input `arg` of `source`.
IoRef Input(IoRef ref, const char* arg, IoRef::Source source) {
  ref.set_arg(arg);
  ref.set_source(source);
  return ref;
}

}  // namespace

std::string AlignmentName(const AlignmentConfig& alignment) {
  return alignment.name().empty() ? alignment.student().path() : alignment.name();
}

std::string OutputProjectorName(const AlignmentConfig& alignment) {
  return absl::StrCat(AlignmentName(alignment), "/output_projector");
}

std::vector<std::string> FeatureDistillationErrors(const FeatureDistillationConfig& config,
                                                   bool criterion_has_terms) {
  std::vector<std::string> errors;
  const bool blockwise = config.mode() == FeatureDistillationConfig::BLOCKWISE;
  if (config.alignments().empty() && config.create_alignments().empty()) {
    errors.push_back(
        "feature_distillation.alignments: at least one alignment is required (or "
        "create_alignments' patterns)");
  }
  for (std::string& error : CreateAlignmentsErrors(config)) errors.push_back(std::move(error));
  if (blockwise && criterion_has_terms) {
    errors.push_back(
        "criterion: a BLOCKWISE stage's loss is its alignments' (each student block against its "
        "teacher block): leave the criterion out");
  }
  if (!config.projector_init().empty() && config.projector_init() != "normal" &&
      config.projector_init() != "xavier") {
    errors.push_back(absl::StrCat("feature_distillation.projector_init: unknown \"",
                                  config.projector_init(),
                                  "\"; give \"\" (torch's default), \"normal\" or \"xavier\""));
  }
  if (config.has_weight() && !std::isfinite(config.weight())) {
    errors.push_back("feature_distillation.weight: must be finite");
  }
  if (!blockwise && (config.backward_per_block() || config.deepcopy_captured_args_and_kwargs() ||
                     config.has_auto_truncate())) {
    errors.push_back(
        "feature_distillation: backward_per_block, deepcopy_captured_args_and_kwargs and "
        "auto_truncate are BLOCKWISE's; a HOLISTIC stage runs both models whole");
  }
  if (blockwise && config.has_weight()) {
    errors.push_back(
        "feature_distillation.weight: HOLISTIC's (a BLOCKWISE loss has no other terms)");
  }
  if (config.has_projector_optimizer()) {
    const OptimizerConfig& other = config.projector_optimizer();
    if (other.key().empty()) {
      errors.push_back("feature_distillation.projector_optimizer.key: required (e.g. \"AdamW\")");
    }
    if (other.param_groups_size() > 0 || other.has_max_grad_norm() || other.grad_accum_step() > 0) {
      errors.push_back(
          "feature_distillation.projector_optimizer: param_groups, max_grad_norm and "
          "grad_accum_step are the stage optimizer's; give only key and kwargs");
    }
  }
  std::set<std::string> names;
  for (int i = 0; i < config.alignments_size(); ++i) {
    const AlignmentConfig& a = config.alignments(i);
    const std::string field = absl::StrCat("feature_distillation.alignments[", i, "]");
    for (const auto& [side, ref] : {std::pair<const char*, const IoRef*>{"teacher", &a.teacher()},
                                    {"student", &a.student()}}) {
      if (ref->path().empty()) {
        errors.push_back(absl::StrCat(field, ".", side, ".path: required (the ", side,
                                      "'s module path, e.g. \"model.layers.1\")"));
      }
      if (ref->source() != IoRef::SOURCE_UNSPECIFIED || !ref->arg().empty()) {
        errors.push_back(
            absl::StrCat(field, ".", side, ": leave `source` and `arg` out (the side says whose)"));
      }
      if (ref->io() == IoRef::PARAMETER) {
        errors.push_back(absl::StrCat(field, ".", side, ".io: OUTPUT or INPUT"));
      }
      if (blockwise && ref->io() == IoRef::INPUT) {
        errors.push_back(absl::StrCat(field, ".", side,
                                      ".io: BLOCKWISE compares the blocks' outputs (their inputs "
                                      "are the teacher's): leave `io` out"));
      }
    }
    if (!names.insert(AlignmentName(a)).second) {
      errors.push_back(absl::StrCat(field, ": two alignments named \"", AlignmentName(a),
                                    "\"; give them distinct `name`s"));
    }
    if (a.has_input_projector() && !blockwise) {
      errors.push_back(absl::StrCat(field,
                                    ".input_projector: a HOLISTIC stage runs the student whole, so "
                                    "nothing takes an input projector (BLOCKWISE does)"));
    }
    if (a.has_loss_weight() && blockwise) {
      errors.push_back(absl::StrCat(field,
                                    ".loss_weight: BLOCKWISE sums its alignments' losses with "
                                    "weight 1 (each trains its own block): leave it out"));
    }
    if (a.has_loss_weight() && !std::isfinite(a.loss_weight())) {
      errors.push_back(absl::StrCat(field, ".loss_weight: must be finite"));
    }
  }
  return errors;
}

absl::StatusOr<StageConfig> ExpandHolistic(const StageConfig& stage,
                                           const std::map<std::string, PluginConfig>& inferred) {
  if (!stage.has_feature_distillation() ||
      stage.feature_distillation().mode() != FeatureDistillationConfig::HOLISTIC) {
    return stage;
  }
  const FeatureDistillationConfig& fd = stage.feature_distillation();
  const std::vector<std::string> errors = FeatureDistillationErrors(fd, false);
  if (!errors.empty()) return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  StageConfig out = stage;
  out.clear_feature_distillation();
  CriterionConfig& criterion = *out.mutable_criterion();
  std::set<std::string> taken;
  for (const LossTermConfig& term : criterion.terms()) {
    taken.insert(term.name().empty() ? term.key() : term.name());
  }
  for (const LossGroupConfig& group : criterion.groups()) taken.insert(group.name());
  if (taken.count(kAlignmentsGroup) > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("criterion: a term or group is named \"", kAlignmentsGroup,
                     "\", the group feature_distillation's alignments are summed into; rename it"));
  }
  LossGroupConfig& group = *criterion.add_groups();
  group.set_name(kAlignmentsGroup);
  if (fd.has_weight()) group.set_weight(fd.weight());
  std::set<std::string> aux_names;
  for (const AuxiliaryModuleConfig& aux : stage.student().auxiliary_modules()) {
    aux_names.insert(aux.name());
  }
  for (const AlignmentConfig& a : fd.alignments()) {
    const std::string name = AlignmentName(a);
    if (!taken.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("feature_distillation: alignment \"", name,
                       "\" has the name of a criterion term; give the alignment another `name`"));
    }
    Hook(*out.mutable_teacher(), a.teacher());
    Hook(*out.mutable_student(), a.student());
    IoRef student = Input(a.student(), "student", IoRef::STUDENT);
    const auto found = inferred.find(name);
    const PluginConfig* projector = a.has_output_projector()  ? &a.output_projector()
                                    : found != inferred.end() ? &found->second
                                                              : nullptr;
    if (projector != nullptr) {
      const std::string aux_name = OutputProjectorName(a);
      if (!aux_names.insert(aux_name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("feature_distillation: the student has an auxiliary module named \"",
                         aux_name, "\" already; rename it or the alignment"));
      }
      AuxiliaryModuleConfig& aux = *out.mutable_student()->add_auxiliary_modules();
      aux.set_name(aux_name);
      aux.set_key(projector->key());
      *aux.mutable_kwargs() = projector->kwargs();
      IoRef& input = *aux.mutable_input();
      input = a.student();
      input.set_source(IoRef::STUDENT);
      student = IoRef();
      student.set_arg("student");
      student.set_source(IoRef::STUDENT);
      student.set_path(aux_name);
    }
    LossTermConfig& term = *criterion.add_terms();
    term.set_name(name);
    term.set_key(a.loss().empty() ? "mse" : a.loss());
    *term.mutable_kwargs() = a.loss_kwargs();
    if (a.has_loss_weight()) term.set_weight(a.loss_weight());
    term.set_group(kAlignmentsGroup);
    *term.add_inputs() = student;
    *term.add_inputs() = Input(a.teacher(), "teacher", IoRef::TEACHER);
  }
  return out;
}

}  // namespace kd
