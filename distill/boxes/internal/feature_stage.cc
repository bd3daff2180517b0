#include "distill/boxes/internal/feature_stage.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/nn/utils/clip_grad.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/ivalue_util.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "distill/boxes/internal/stage_impl.h"
#include "distill/boxes/internal/stage_setup.h"
#include "distill/config/create_alignments.h"
#include "distill/config/feature_distillation.h"
#include "distill/config/kwargs.h"
#include "distill/config/plugin_config.pb.h"
#include "distill/losses/criterion.h"
#include "distill/losses/loss.h"
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
  absl::StatusOr<c10::IValue> output = ProbeForward(model, [&] { return forward(model, probe); });
  if (!output.ok()) return WithContext(absl::StrCat(role, "'s probe forward"), output.status());
  return hooks.PopIoDict();
}

}  // namespace

absl::StatusOr<c10::IValue> ProbeForward(
    Model& model, const std::function<absl::StatusOr<c10::IValue>()>& run) {
  const bool training = model.is_training();
  model.SetTraining(false);
  absl::StatusOr<c10::IValue> output = CallTorchFlat([&]() -> absl::StatusOr<c10::IValue> {
    at::NoGradGuard no_grad;
    return run();
  });
  model.SetTraining(training);
  return output;
}

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

absl::StatusOr<StageConfig> Stage::ExpandFeatureDistillation(
    const StageConfig& given, const StageConfig* previous,
    const std::map<std::string, std::shared_ptr<Dataset>>& datasets, int64_t seed) {
  blockwise_.reset();
  const FeatureDistillationConfig& fd = given.feature_distillation();
  if (!given.has_feature_distillation()) return given;
  if (teacher_ == nullptr) {
    return absl::InvalidArgumentError("feature_distillation: the run has no teacher to align with");
  }
  if (!fd.create_alignments().empty()) {
    // silverspoon-kd's create_alignments: the patterns made into alignments first.
    auto paths = [](const Model& model) {
      std::vector<std::string> out;
      for (const ModuleInfo& m : model.NamedModules()) out.push_back(m.path);
      return out;
    };
    absl::StatusOr<FeatureDistillationConfig> made =
        CreateAlignments(fd, paths(*teacher_), paths(*student_));
    if (!made.ok()) return made.status();
    StageConfig with_alignments = given;
    *with_alignments.mutable_feature_distillation() = *std::move(made);
    return ExpandFeatureDistillation(with_alignments, previous, datasets, seed);
  }
  const bool blockwise = fd.mode() == FeatureDistillationConfig::BLOCKWISE;
  if (const std::vector<std::string> errors =
          FeatureDistillationErrors(fd, given.criterion().terms_size() > 0);
      !errors.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
  }
  const bool infer =
      std::any_of(fd.alignments().begin(), fd.alignments().end(), [&](const AlignmentConfig& a) {
        return AutoProjector(a) &&
               (!a.has_output_projector() || (blockwise && !a.has_input_projector()));
      });
  // The probe: the training set's first two samples, in order (the loader's own generator:
  // the run's draws are left alone).
  Batch probe;
  if (infer || blockwise) {
    LoaderConfig loader = given.has_train_data_loader() || previous == nullptr
                              ? given.train_data_loader()
                              : previous->train_data_loader();
    loader.set_batch_size(2);
    loader.set_shuffle(false);
    loader.clear_sampler();
    loader.set_num_workers(0);
    loader.set_drop_last(false);
    KD_ASSIGN_OR_RETURN(std::unique_ptr<DataLoader> made,
                        MakeLoader(loader, datasets, seed, "train_data_loader"));
    probe = BatchStream(*made).Next();
    ToDevice(probe);
  }
  if (blockwise) {
    if (distributed()) {
      return absl::UnimplementedError(
          "feature_distillation: BLOCKWISE runs in one process (its per-block backward has no "
          "gradient reduction yet); use HOLISTIC or one process");
    }
    if (given.optimizer().param_groups_size() > 0) {
      return absl::InvalidArgumentError(
          "optimizer.param_groups: a BLOCKWISE stage makes one group per alignment (its block "
          "and projectors); leave param_groups out");
    }
    absl::StatusOr<std::unique_ptr<Blockwise>> made =
        Blockwise::Make(given, *teacher_, *student_, probe, device_);
    if (!made.ok()) return WithContext("feature_distillation", made.status());
    blockwise_ = *std::move(made);
    backward_per_block_ = fd.backward_per_block();
    return given;
  }
  std::map<std::string, PluginConfig> inferred;
  if (infer) {
    absl::StatusOr<std::map<std::string, PluginConfig>> made =
        InferOutputProjectors(given, *teacher_, *student_, probe);
    if (!made.ok()) return WithContext("feature_distillation", made.status());
    inferred = *std::move(made);
  }
  return ExpandHolistic(given, inferred);
}

}  // namespace boxes_internal
}  // namespace kd
