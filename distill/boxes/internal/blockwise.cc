// Blockwise (feature_stage.h): a BLOCKWISE stage's blocks on the teacher's captured inputs.
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/nn/utils/clip_grad.h>

#include "absl/strings/str_cat.h"
#include "base/ivalue_util.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "distill/boxes/internal/feature_stage.h"
#include "distill/boxes/internal/stage_impl.h"
#include "distill/boxes/internal/stage_setup.h"
#include "distill/config/feature_distillation.h"
#include "distill/config/kwargs.h"
#include "distill/config/plugin_config.pb.h"
#include "distill/losses/criterion.h"
#include "distill/losses/loss.h"
#include "distill/procs/proc_func.h"
#include "hooks/forward_hook_manager.h"

namespace kd {
namespace boxes_internal {

struct Blockwise::Block {
  std::string name;
  AlignmentConfig config;
  std::unique_ptr<Model> module;  // the student's module at config.student().path()
  AuxModule* input_projector = nullptr;
  int64_t input_arg = 0;
  AuxModule* output_projector = nullptr;
  std::unique_ptr<Loss> loss;
  std::vector<at::Tensor> params;   // the module's, then the projectors'
  std::vector<at::Tensor> clipped;  // what ClipGradNorm clips
};

namespace {

// `value` as the tensor `ref` selects; a tuple without `element` gives its first element
// (silverspoon-kd's OutputSelector(0)).
absl::StatusOr<at::Tensor> Select(c10::IValue value, const IoRef& ref) {
  if (!ref.has_element() && ref.key().empty() && value.isTuple() &&
      !value.toTupleRef().elements().empty()) {
    value = value.toTupleRef().elements()[0];
  }
  return SelectedTensor(std::move(value), ref);
}

// Each module's (args, output) captured from `model`'s forward on `probe`, without gradients,
// in eval mode (restored).
absl::StatusOr<std::vector<Captured>> ProbeCaptures(Model& model,
                                                    const std::vector<std::string>& paths,
                                                    const c10::IValue& probe) {
  ModuleCaptureEngine engine(model, paths, {.auto_truncate = true});
  KD_RETURN_IF_ERROR(engine.Register());
  KD_RETURN_IF_ERROR(ProbeForward(model, [&] { return engine.Forward({probe}); }).status());
  std::vector<Captured> out;
  for (size_t i = 0; i < paths.size(); ++i) {
    KD_ASSIGN_OR_RETURN(Captured captured, engine.GetCaptured(static_cast<int>(i)));
    out.push_back(std::move(captured));
  }
  return out;
}

// The projector `config` (given, else inferred when `infer`) built as a student auxiliary
// module named `name`, or null for none.
absl::StatusOr<std::optional<AuxModule>> MakeProjector(
    const std::string& name, const PluginConfig* given,
    const std::function<absl::StatusOr<std::optional<PluginConfig>>()>& infer, c10::Device device,
    Kwarg* apply_to_arg) {
  std::optional<PluginConfig> config;
  if (given != nullptr) {
    config = *given;
  } else if (infer) {
    KD_ASSIGN_OR_RETURN(config, infer());
  }
  if (!config.has_value()) return std::optional<AuxModule>();
  // An input projector's apply_to_arg is the block's, not the module's.
  PluginConfig module_config = *config;
  module_config.clear_kwargs();
  for (const Kwarg& kwarg : config->kwargs()) {
    if (apply_to_arg != nullptr && kwarg.name() == "apply_to_arg") {
      *apply_to_arg = kwarg;
    } else {
      *module_config.add_kwargs() = kwarg;
    }
  }
  StageModelConfig holder;
  AuxiliaryModuleConfig& aux = *holder.add_auxiliary_modules();
  aux.set_name(name);
  aux.set_key(module_config.key());
  *aux.mutable_kwargs() = module_config.kwargs();
  aux.mutable_input()->set_path(name);  // unused: the block runs it
  std::vector<AuxModule> made;
  KD_RETURN_IF_ERROR(AddAuxiliaryModules(holder, ModelRole::kStudent, "student", device, made));
  return std::optional<AuxModule>(std::move(made.front()));
}

}  // namespace

Blockwise::~Blockwise() = default;

absl::StatusOr<std::unique_ptr<Blockwise>> Blockwise::Make(const StageConfig& stage, Model& teacher,
                                                           Model& student, const Batch& probe,
                                                           c10::Device device) {
  const FeatureDistillationConfig& fd = stage.feature_distillation();
  std::unique_ptr<Blockwise> out(new Blockwise());
  out->clip_projectors_ = !fd.has_clip_projectors() || fd.clip_projectors();
  std::vector<std::string> teacher_paths, student_paths;
  bool infer = false;
  for (const AlignmentConfig& a : fd.alignments()) {
    teacher_paths.push_back(a.teacher().path());
    student_paths.push_back(a.student().path());
    infer = infer || (AutoProjector(a) && (!a.has_input_projector() || !a.has_output_projector()));
  }
  std::vector<Captured> teacher_probe, student_probe;
  if (infer) {
    absl::StatusOr<std::vector<Captured>> t = ProbeCaptures(teacher, teacher_paths, probe.samples);
    if (!t.ok()) return WithContext("the teacher's probe forward", t.status());
    absl::StatusOr<std::vector<Captured>> s = ProbeCaptures(student, student_paths, probe.samples);
    if (!s.ok()) return WithContext("the student's probe forward", s.status());
    teacher_probe = *std::move(t);
    student_probe = *std::move(s);
  }
  out->projectors_.reserve(2 * static_cast<size_t>(fd.alignments_size()));
  for (int i = 0; i < fd.alignments_size(); ++i) {
    const AlignmentConfig& a = fd.alignments(i);
    auto block = std::make_unique<Block>();
    block->name = AlignmentName(a);
    block->config = a;
    const std::string context = absl::StrCat("alignment \"", block->name, "\"");
    absl::StatusOr<std::unique_ptr<Model>> module = student.Submodel(a.student().path());
    if (!module.ok()) return WithContext(context, module.status());
    block->module = *std::move(module);
    const bool auto_projector = AutoProjector(a) && infer;
    // The input projector: the teacher module's input against the student module's own.
    Kwarg apply_to_arg;
    auto infer_input = [&]() -> absl::StatusOr<std::optional<PluginConfig>> {
      const std::vector<c10::IValue>& t = teacher_probe[i].args;
      const std::vector<c10::IValue>& s = student_probe[i].args;
      if (t.empty() || s.empty() || !t[0].isTensor() || !s[0].isTensor()) {
        return std::optional<PluginConfig>();
      }
      return InferProjector(t[0].toTensor(), s[0].toTensor(), fd.projector_init());
    };
    absl::StatusOr<std::optional<AuxModule>> input =
        MakeProjector(absl::StrCat(block->name, "/input_projector"),
                      a.has_input_projector() ? &a.input_projector() : nullptr,
                      auto_projector ? std::function(infer_input) : nullptr, device, &apply_to_arg);
    if (!input.ok()) return WithContext(absl::StrCat(context, " input_projector"), input.status());
    if (apply_to_arg.has_integer()) block->input_arg = apply_to_arg.integer();
    // The output projector: the student module's output against the teacher module's.
    auto infer_output = [&]() -> absl::StatusOr<std::optional<PluginConfig>> {
      KD_ASSIGN_OR_RETURN(const at::Tensor s, Select(student_probe[i].output, a.student()));
      KD_ASSIGN_OR_RETURN(const at::Tensor t, Select(teacher_probe[i].output, a.teacher()));
      return InferProjector(s, t, fd.projector_init());
    };
    absl::StatusOr<std::optional<AuxModule>> output =
        MakeProjector(absl::StrCat(block->name, "/output_projector"),
                      a.has_output_projector() ? &a.output_projector() : nullptr,
                      auto_projector ? std::function(infer_output) : nullptr, device, nullptr);
    if (!output.ok())
      return WithContext(absl::StrCat(context, " output_projector"), output.status());
    for (const NamedTensor& p : block->module->NamedParameters()) {
      block->params.push_back(p.second);
      block->clipped.push_back(p.second);
    }
    for (std::optional<AuxModule>* projector : {&*input, &*output}) {
      if (!projector->has_value()) continue;
      out->projectors_.push_back(**std::move(projector));
      AuxModule& kept = out->projectors_.back();
      (projector == &*input ? block->input_projector : block->output_projector) = &kept;
      for (const at::Tensor& p : kept.module.ptr()->parameters()) {
        block->params.push_back(p);
        if (out->clip_projectors_) block->clipped.push_back(p);
      }
    }
    const std::string key = a.loss().empty() ? "mse" : a.loss();
    absl::StatusOr<Kwargs> kwargs =
        PluginKwargs(LossRegistry(), key, a.loss_kwargs(), absl::StrCat("loss \"", key, "\""));
    if (!kwargs.ok()) return WithContext(context, kwargs.status());
    absl::StatusOr<std::unique_ptr<Loss>> loss = MakeLoss(key, *kwargs);
    if (!loss.ok()) return WithContext(context, loss.status());
    block->loss = *std::move(loss);
    out->blocks_.push_back(std::move(block));
  }
  const bool truncate = !fd.has_auto_truncate() || fd.auto_truncate();
  out->engine_ = std::make_unique<ModuleCaptureEngine>(
      teacher, teacher_paths,
      CaptureOptions{.deepcopy_captured_args_and_kwargs = fd.deepcopy_captured_args_and_kwargs(),
                     .auto_truncate = truncate});
  KD_RETURN_IF_ERROR(WithContext("the teacher's capture", out->engine_->Register()));
  return out;
}

std::vector<AuxModule> Blockwise::TakeProjectors() {
  std::vector<AuxModule> out;
  for (AuxModule& projector : projectors_) out.push_back(projector);  // shares the modules
  return out;
}

std::vector<ParamGroup> Blockwise::ParamGroups(const Kwargs& kwargs) const {
  std::vector<ParamGroup> groups;
  for (const auto& block : blocks_) groups.push_back({block->params, kwargs});
  return groups;
}

absl::StatusOr<CriterionResult> Blockwise::Forward(
    const c10::IValue& samples, const std::function<void(const at::Tensor&)>& backward) {
  {
    at::NoGradGuard no_grad;
    engine_->ClearCaptured();
    KD_RETURN_IF_ERROR(WithContext("the teacher's forward", engine_->Forward({samples}).status()));
  }
  CriterionResult result;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    Block& block = *blocks_[i];
    const std::string context = absl::StrCat("alignment \"", block.name, "\"");
    absl::StatusOr<std::pair<std::vector<c10::IValue>, Kwargs>> inputs =
        engine_->PopCapturedInputs(static_cast<int>(i));
    if (!inputs.ok()) return WithContext(context, inputs.status());
    absl::StatusOr<c10::IValue> captured = engine_->PopCapturedOutput(static_cast<int>(i));
    if (!captured.ok()) return WithContext(context, captured.status());
    absl::StatusOr<at::Tensor> target = Select(*std::move(captured), block.config.teacher());
    if (!target.ok()) return WithContext(context, target.status());
    auto& [args, kwargs] = *inputs;
    // silverspoon-kd drops a cache the teacher's call carried: blocks learn without one.
    for (const char* key : {"past_key_values", "use_cache", "cache_position"}) kwargs.erase(key);
    if (block.input_projector != nullptr) {
      if (block.input_arg < 0 || block.input_arg >= static_cast<int64_t>(args.size()) ||
          !args[block.input_arg].isTensor()) {
        return absl::InvalidArgumentError(
            absl::StrCat(context, ": the input projector's apply_to_arg ", block.input_arg,
                         " is not a tensor argument of the ", args.size(), " the module takes"));
      }
      args[block.input_arg] =
          block.input_projector->module.forward(args[block.input_arg].toTensor());
    }
    absl::StatusOr<c10::IValue> output =
        CallTorch([&] { return block.module->Forward(std::move(args), kwargs); });
    if (!output.ok()) return WithContext(context, output.status());
    absl::StatusOr<at::Tensor> prediction = Select(*std::move(output), block.config.student());
    if (!prediction.ok()) return WithContext(context, prediction.status());
    if (block.output_projector != nullptr) {
      *prediction = block.output_projector->module.forward(*prediction);
    }
    absl::StatusOr<at::Tensor> loss = block.loss->Forward(
        LossInputs{{"student", *std::move(prediction)}, {"teacher", *std::move(target)}});
    if (!loss.ok()) return WithContext(context, loss.status());
    at::Tensor value = *std::move(loss);
    if (backward && value.requires_grad()) {
      backward(value);
      value = value.detach();
    }
    result.total = result.total.defined() ? result.total + value : value;
    result.terms.push_back({block.name, 1.0, value.detach()});
  }
  return result;
}

void Blockwise::ClipGradNorm(double max_norm) const {
  for (const auto& block : blocks_) torch::nn::utils::clip_grad_norm_(block->clipped, max_norm);
}

}  // namespace boxes_internal
}  // namespace kd
