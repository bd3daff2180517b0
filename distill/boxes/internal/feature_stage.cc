#include "distill/boxes/internal/feature_stage.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "absl/strings/str_cat.h"
#include "base/ivalue_util.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "distill/boxes/internal/stage_setup.h"
#include "distill/config/feature_distillation.h"
#include "distill/config/plugin_config.pb.h"
#include "distill/losses/criterion.h"
#include "distill/procs/proc_func.h"
#include "hooks/forward_hook_manager.h"

namespace kd {
namespace boxes_internal {
namespace {

void AddIntKwarg(PluginConfig& plugin, const char* name, int64_t value) {
  Kwarg& kwarg = *plugin.add_kwargs();
  kwarg.set_name(name);
  kwarg.set_integer(value);
}

// `model`'s I/O dict on `probe` through the hooks `config` gives it, in eval mode without
// gradients (its mode restored).
absl::StatusOr<IoDict> ProbeIo(Model& model, const StageModelConfig& config, const Batch& probe,
                               const char* role) {
  ForwardHookManager hooks(probe.samples.isTensor() ? probe.samples.toTensor().device()
                                                    : c10::Device(c10::kCPU));
  KD_RETURN_IF_ERROR(AddStageHooks(hooks, &model, config, role));
  KD_ASSIGN_OR_RETURN(ProcFunc<ForwardProc> forward, BuildForwardProcFunc(config));
  const bool training = model.is_training();
  model.SetTraining(false);
  absl::StatusOr<c10::IValue> output = CallTorchFlat([&]() -> absl::StatusOr<c10::IValue> {
    at::NoGradGuard no_grad;
    return forward(model, probe);
  });
  model.SetTraining(training);
  if (!output.ok()) return WithContext(absl::StrCat(role, "'s probe forward"), output.status());
  return hooks.PopIoDict();
}

}  // namespace

absl::StatusOr<std::optional<PluginConfig>> InferProjector(const at::Tensor& student,
                                                           const at::Tensor& teacher,
                                                           const std::string& init) {
  if (student.sizes() == teacher.sizes()) return std::nullopt;
  PluginConfig projector;
  if (student.dim() == 4 && teacher.dim() == 4 && student.size(1) != teacher.size(1) &&
      student.size(2) == teacher.size(2) && student.size(3) == teacher.size(3)) {
    projector.set_key("GenericConv2dProjector");
    AddIntKwarg(projector, "in_channels", student.size(1));
    AddIntKwarg(projector, "out_channels", teacher.size(1));
    return projector;
  }
  if (student.dim() >= 1 && student.dim() == teacher.dim() &&
      student.sizes().slice(0, student.dim() - 1) == teacher.sizes().slice(0, teacher.dim() - 1)) {
    projector.set_key("GenericLinearProjector");
    AddIntKwarg(projector, "in_features", student.size(-1));
    AddIntKwarg(projector, "out_features", teacher.size(-1));
    if (!init.empty()) {
      Kwarg& kwarg = *projector.add_kwargs();
      kwarg.set_name("init");
      kwarg.set_str(init);
    }
    return projector;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "cannot infer a projector from the student's ", ShapeString(student), " to the teacher's ",
      ShapeString(teacher),
      ": neither only the last dimension nor only the channels of a 4-d value differ; give "
      "output_projector (an auxiliary-module key and its kwargs)"));
}

absl::StatusOr<std::map<std::string, PluginConfig>> InferOutputProjectors(const StageConfig& stage,
                                                                          Model& teacher,
                                                                          Model& student,
                                                                          const Batch& probe) {
  std::map<std::string, PluginConfig> inferred;
  const FeatureDistillationConfig& fd = stage.feature_distillation();
  bool needed = false;
  for (const AlignmentConfig& a : fd.alignments()) {
    needed = needed || (AutoProjector(a) && !a.has_output_projector());
  }
  if (!needed) return inferred;
  // The hooks the stage will have, without projectors.
  KD_ASSIGN_OR_RETURN(const StageConfig plain, ExpandHolistic(stage, {}));
  KD_ASSIGN_OR_RETURN(const IoDict teacher_io,
                      ProbeIo(teacher, plain.teacher(), probe, "the teacher"));
  KD_ASSIGN_OR_RETURN(const IoDict student_io,
                      ProbeIo(student, plain.student(), probe, "the student"));
  for (const AlignmentConfig& a : fd.alignments()) {
    if (!AutoProjector(a) || a.has_output_projector()) continue;
    const std::string context = absl::StrCat("alignment \"", AlignmentName(a), "\"");
    absl::StatusOr<at::Tensor> s = RecordedTensor(student_io, a.student());
    if (!s.ok()) return WithContext(context, s.status());
    absl::StatusOr<at::Tensor> t = RecordedTensor(teacher_io, a.teacher());
    if (!t.ok()) return WithContext(context, t.status());
    absl::StatusOr<std::optional<PluginConfig>> projector =
        InferProjector(*s, *t, fd.projector_init());
    if (!projector.ok()) return WithContext(context, projector.status());
    if (projector->has_value()) inferred.emplace(AlignmentName(a), **projector);
  }
  return inferred;
}

}  // namespace boxes_internal
}  // namespace kd
