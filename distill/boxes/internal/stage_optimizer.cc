// Stage's optimizer over what trains (the student, its auxiliary modules, the losses' own
// parameters, a training teacher; a BLOCKWISE stage's blocks by alignment; projectors apart with
// projector_optimizer), what ClipGradNorm clips, the DDP wrapping and the scheduler.
#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ATen/record_function.h>
#include <torch/optim/optimizer.h>

#include "absl/strings/str_cat.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "distill/boxes/distributed/ddp.h"
#include "distill/boxes/internal/stage_impl.h"
#include "distill/boxes/internal/stage_setup.h"
#include "distill/boxes/optim/composite_optimizer.h"
#include "distill/boxes/optim/optim.h"
#include "distill/config/feature_distillation.h"
#include "distill/config/kwargs.h"

namespace kd {
namespace boxes_internal {
namespace {

// `config` (and the schedulers it composes) as MakeScheduler takes it.
absl::StatusOr<SchedulerSpec> SchedulerSpecOf(const SchedulerConfig& config) {
  SchedulerSpec spec{config.key(), {}, {}};
  KD_ASSIGN_OR_RETURN(spec.kwargs, PluginKwargs(SchedulerRegistry(), config.key(), config.kwargs(),
                                                absl::StrCat("scheduler \"", config.key(), "\"")));
  for (const SchedulerConfig& child : config.schedulers()) {
    KD_ASSIGN_OR_RETURN(SchedulerSpec made, SchedulerSpecOf(child));
    spec.children.push_back(std::move(made));
  }
  return spec;
}

}  // namespace

absl::Status Stage::BuildOptimizer(const StageConfig& config, const StageConfig& given,
                                   const StageConfig* previous) {
  // Optimizer over what trains, and the loss's own parameters.
  const OptimizerConfig& optimizer =
      config.has_optimizer() || previous == nullptr ? config.optimizer() : previous->optimizer();
  std::vector<at::Tensor> own = criterion_->Parameters();
  for (const AuxModule& aux : aux_) {
    for (const at::Tensor& p : aux.module.ptr()->parameters()) {
      if (p.requires_grad()) own.push_back(p);
    }
  }
  // The projectors feature_distillation made (the student's auxiliary modules it named).
  const FeatureDistillationConfig& fd = given.feature_distillation();
  std::set<const c10::TensorImpl*> projectors;
  for (const AlignmentConfig& a : fd.alignments()) {
    for (const char* role : {"input_projector", "output_projector"}) {
      const std::string name = absl::StrCat("student.", AlignmentName(a), "/", role);
      for (const AuxModule& aux : aux_) {
        if (aux.name != name) continue;
        for (const at::Tensor& p : aux.module.ptr()->parameters()) {
          projectors.insert(p.unsafeGetTensorImpl());
        }
      }
    }
  }
  auto is_projector = [&](const at::Tensor& p) {
    return projectors.count(p.unsafeGetTensorImpl()) > 0;
  };
  // projector_optimizer: the projectors' parameters in groups of their own, for a second
  // optimizer stepped with the stage's as one (CompositeOptimizer).
  const bool apart = fd.has_projector_optimizer() && !projectors.empty();
  KD_RETURN_IF_ERROR(WrapForDataParallel(config, own));
  std::vector<ParamGroup> groups, projector_groups;
  if (blockwise_ != nullptr) {
    // silverspoon-kd's per-alignment optimizers as one optimizer's groups (its DeepSpeed form):
    // each parameter's update reads only its own state and its group's settings.
    groups = blockwise_->ParamGroups({});
    if (apart) {
      for (ParamGroup& group : groups) {
        ParamGroup moved;
        for (const at::Tensor& p : group.params) {
          if (is_projector(p)) moved.params.push_back(p);
        }
        std::erase_if(group.params, is_projector);
        if (!moved.params.empty()) projector_groups.push_back(std::move(moved));
      }
    }
  } else {
    if (apart) {
      projector_groups.push_back({});
      for (const at::Tensor& p : own) {
        if (is_projector(p)) projector_groups.back().params.push_back(p);
      }
      std::erase_if(own, is_projector);
    }
    KD_ASSIGN_OR_RETURN(
        groups, BuildParamGroups(optimizer, student_, teacher_, teacher_trains_, std::move(own)));
  }
  params_.clear();
  for (const auto* list : {&groups, &projector_groups}) {
    for (const ParamGroup& group : *list) {
      params_.insert(params_.end(), group.params.begin(), group.params.end());
    }
  }
  // clip_projectors false: the projectors' gradients left unclipped (BLOCKWISE clips by block).
  clipped_ = params_;
  if (fd.has_clip_projectors() && !fd.clip_projectors()) std::erase_if(clipped_, is_projector);
  KD_ASSIGN_OR_RETURN(Kwargs opt_kwargs,
                      PluginKwargs(OptimizerRegistry(), optimizer.key(), optimizer.kwargs(),
                                   absl::StrCat("optimizer \"", optimizer.key(), "\"")));
  // torchdistill's lr_factor: every "lr" the config gives, the optimizer's and the groups'.
  if (lr_factor_ != 1.0) {
    auto scale = [this](Kwargs& kwargs) {
      if (FindKwarg(kwargs, "lr") != nullptr) kwargs["lr"] = NumberKwarg(kwargs, "lr") * lr_factor_;
    };
    scale(opt_kwargs);
    for (ParamGroup& group : groups) scale(group.kwargs);
  }
  absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> made =
      MakeOptimizer(optimizer.key(), std::move(groups), opt_kwargs);
  if (!made.ok()) return WithContext("optimizer", made.status());
  optimizer_ = *std::move(made);
  if (apart) {
    const OptimizerConfig& other = fd.projector_optimizer();
    const std::string field = "feature_distillation.projector_optimizer";
    absl::StatusOr<Kwargs> kwargs = PluginKwargs(OptimizerRegistry(), other.key(), other.kwargs(),
                                                 absl::StrCat("optimizer \"", other.key(), "\""));
    if (!kwargs.ok()) return WithContext(field, kwargs.status());
    if (lr_factor_ != 1.0 && FindKwarg(*kwargs, "lr") != nullptr) {
      (*kwargs)["lr"] = NumberKwarg(*kwargs, "lr") * lr_factor_;
    }
    absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> second =
        MakeOptimizer(other.key(), std::move(projector_groups), *kwargs);
    if (!second.ok()) return WithContext(field, second.status());
    std::vector<CompositeOptimizer::Child> children;
    children.push_back({"student", std::move(optimizer_)});
    children.push_back({"projectors", *std::move(second)});
    optimizer_ = std::make_unique<CompositeOptimizer>(std::move(children));
  }
  max_grad_norm_ = optimizer.has_max_grad_norm() ? std::optional<double>(optimizer.max_grad_norm())
                                                 : std::nullopt;
  grad_accum_step_ = std::max(1, optimizer.grad_accum_step());
  teacher_in_eval_mode_ = config.teacher_mode() != StageConfig::TEACHER_AS_IS;
  const SchedulerConfig& scheduler =
      config.has_scheduler() || previous == nullptr ? config.scheduler() : previous->scheduler();
  if (!scheduler.key().empty()) {
    KD_ASSIGN_OR_RETURN(const SchedulerSpec spec, SchedulerSpecOf(scheduler));
    KD_ASSIGN_OR_RETURN(scheduler_, MakeScheduler(spec, *optimizer_));
    scheduling_step_ = scheduler.scheduling_step();
  }
  return absl::OkStatus();
}

absl::Status Stage::WrapForDataParallel(const StageConfig& config,
                                        const std::vector<at::Tensor>& own) {
  ddp_.reset();
  if (!distributed()) return absl::OkStatus();
  constexpr auto kDdp = StageModelConfig::DISTRIBUTED_DATA_PARALLEL;
  std::vector<Model*> models;
  bool find_unused = false;
  if (config.student().wrapper() == kDdp) {
    models.push_back(student_);
    find_unused = config.student().find_unused_parameters();
  }
  if (teacher_trains_ && config.teacher().wrapper() == kDdp) {
    models.push_back(teacher_);
    find_unused = find_unused || config.teacher().find_unused_parameters();
  }
  if (models.empty()) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<DataParallel>> ddp = DataParallel::Create(
      models, group_, {.find_unused_parameters = find_unused, .extra_parameters = own});
  if (!ddp.ok()) return WithContext("wrapper", ddp.status());
  ddp_ = *std::move(ddp);
  return absl::OkStatus();
}

void Stage::OptimizerStep() {
  RECORD_USER_SCOPE("optimizer_step");
  if (scaler_ == nullptr) {
    optimizer_->step();
    return;
  }
  scaler_->Step(*optimizer_);  // skipped on inf/NaN gradients
  scaler_->Update();
}

}  // namespace boxes_internal
}  // namespace kd
