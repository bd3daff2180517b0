#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/optim/optimizer.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/ivalue_util.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "distill/boxes/amp.h"
#include "distill/boxes/distributed/ddp.h"
#include "distill/boxes/internal/feature_stage.h"
#include "distill/boxes/internal/stage_impl.h"
#include "distill/boxes/internal/stage_setup.h"
#include "distill/boxes/io_util.h"
#include "distill/boxes/metrics/metrics.h"
#include "distill/boxes/optim/composite_optimizer.h"
#include "distill/boxes/optim/optim.h"
#include "distill/config/feature_distillation.h"
#include "distill/config/kwargs.h"
#include "distill/data/data_loader.h"
#include "distill/losses/criterion.h"
#include "distill/procs/proc_func.h"
#include "distill/procs/training_context.h"
#include "hooks/forward_hook_manager.h"
#include "memdiag/leak_detection.h"

namespace kd {
namespace boxes_internal {
namespace {

// "float32[32, 1, 28, 28]" for a batch's samples tensor, its kind otherwise.
std::string DescribeSamples(const c10::IValue& samples) {
  if (!samples.isTensor()) return samples.tagKind();
  const at::Tensor& t = samples.toTensor();
  return absl::StrCat(c10::toString(t.scalar_type()), ShapeString(t));
}

// A stage of a box: what torchdistill's box holds for the current stage.

}  // namespace

absl::Status Stage::Build(const StageConfig& given, const StageConfig* previous,
                          const std::map<std::string, std::shared_ptr<Dataset>>& datasets,
                          const EvaluationConfig& evaluation, int64_t seed,
                          const std::string& run_dir) {
  // A HOLISTIC feature_distillation is built as what it expands into.
  KD_ASSIGN_OR_RETURN(config_, ExpandFeatureDistillation(given, previous, datasets, seed));
  const StageConfig& config = config_;
  name_ = config.name();
  const bool with_teacher = teacher_ != nullptr;
  // Models: requires_grad and frozen modules.
  teacher_trains_ =
      with_teacher && config.teacher().has_requires_grad() && config.teacher().requires_grad();
  aux_.clear();
  KD_RETURN_IF_ERROR(
      AddAuxiliaryModules(config.student(), ModelRole::kStudent, "student", device_, aux_));
  if (blockwise_ != nullptr) {
    for (AuxModule& projector : blockwise_->TakeProjectors()) aux_.push_back(std::move(projector));
  }
  if (with_teacher) {
    KD_RETURN_IF_ERROR(
        AddAuxiliaryModules(config.teacher(), ModelRole::kTeacher, "teacher", device_, aux_));
  }
  KD_RETURN_IF_ERROR(SetRequiresGrad(*student_, config.student(), true, "student"));
  if (with_teacher) {
    KD_RETURN_IF_ERROR(SetRequiresGrad(*teacher_, config.teacher(), false, "teacher"));
  }
  // Devices (torchdistill's wrap_model; the wrappers come once the optimizer's are known).
  KD_RETURN_IF_ERROR(
      WithContext("student", WrapModel(*student_, config.student(), device_, distributed())));
  if (with_teacher) {
    KD_RETURN_IF_ERROR(
        WithContext("teacher", WrapModel(*teacher_, config.teacher(), device_, distributed())));
  }
  // Hooks.
  KD_RETURN_IF_ERROR(AddStageHooks(teacher_hooks_, teacher_, config.teacher(), "teacher"));
  KD_RETURN_IF_ERROR(AddStageHooks(student_hooks_, student_, config.student(), "student"));
  // Loss.
  absl::StatusOr<Criterion> criterion = Criterion::FromConfig(config.criterion());
  if (!criterion.ok()) return WithContext("criterion", criterion.status());
  criterion_ = std::make_unique<Criterion>(*std::move(criterion));
  // Loaders (a later stage may keep the previous one's).
  const LoaderConfig& train = config.has_train_data_loader() || previous == nullptr
                                  ? config.train_data_loader()
                                  : previous->train_data_loader();
  const LoaderConfig& val = config.has_val_data_loader() || previous == nullptr
                                ? config.val_data_loader()
                                : previous->val_data_loader();
  // Each rank gets its shard: DistributedSampler's for training, an exact partition for
  // validation (EvaluateOn adds the shards' sums: every rank gets the whole set's metrics).
  KD_ASSIGN_OR_RETURN(train_loader_,
                      MakeLoader(train, datasets, seed, "train_data_loader", world_size(), rank()));
  train_dataset_ = train.dataset_id();
  if (!val.dataset_id().empty()) {
    KD_ASSIGN_OR_RETURN(val_loader_, MakeLoader(val, datasets, seed, "val_data_loader",
                                                world_size(), rank(), /*exact_shards=*/true));
  }
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
    KD_ASSIGN_OR_RETURN(Kwargs kwargs,
                        PluginKwargs(SchedulerRegistry(), scheduler.key(), scheduler.kwargs(),
                                     absl::StrCat("scheduler \"", scheduler.key(), "\"")));
    KD_ASSIGN_OR_RETURN(scheduler_, MakeScheduler(scheduler.key(), *optimizer_, kwargs));
    scheduling_step_ = scheduler.scheduling_step();
  }
  // Process functions.
  KD_ASSIGN_OR_RETURN(pre_epoch_, BuildStageProcFunc<PreEpochProc>(config, with_teacher));
  KD_ASSIGN_OR_RETURN(pre_forward_, BuildStageProcFunc<PreForwardProc>(config, with_teacher));
  KD_ASSIGN_OR_RETURN(post_forward_, BuildStageProcFunc<PostForwardProc>(config, with_teacher));
  KD_ASSIGN_OR_RETURN(post_epoch_, BuildStageProcFunc<PostEpochProc>(config, with_teacher));
  KD_ASSIGN_OR_RETURN(student_forward_, BuildForwardProcFunc(config.student()));
  // Evaluation runs the student itself: a stage that does not run it in training (forward_proc
  // identity, torchdistill's EmptyModule) evaluates it with forward_batch_only, as torchdistill's
  // scripts evaluate the model, not what stands in for it.
  if (config.student().forward_proc().key() == "identity") {
    KD_ASSIGN_OR_RETURN(eval_forward_, BuildProcFunc<ForwardProc>("forward_batch_only"));
  } else {
    eval_forward_ = student_forward_;
  }
  if (blockwise_ != nullptr) {
    // The teacher runs through the capture engine: neither the cache of hooked values nor the
    // look-ahead serve it (a cache of every block's captured inputs would hold the teacher's
    // activations for the whole training set).
    StageConfig plain = config;
    plain.mutable_teacher_cache()->set_mode(Switch::OFF);
    plain.set_overlap_teacher(Switch::OFF);
    KD_RETURN_IF_ERROR(SetUpTeacher(plain, run_dir));
  } else {
    KD_RETURN_IF_ERROR(SetUpTeacher(config, run_dir));
  }
  // Leak detection in the validation loop (memdiag).
  leaks_ = {};
  if (evaluation.has_memory_leak_detection()) {
    KD_ASSIGN_OR_RETURN(leaks_, MakeLeakDetection(evaluation.memory_leak_detection(), device_,
                                                  *student_, teacher_, *optimizer_));
  }
  // Metrics.
  for (const MetricConfig& metric : evaluation.metrics()) {
    KD_ASSIGN_OR_RETURN(Kwargs kwargs, PluginKwargs(MetricRegistry(), metric.key(), metric.kwargs(),
                                                    absl::StrCat("metric \"", metric.key(), "\"")));
    KD_ASSIGN_OR_RETURN(std::unique_ptr<Metric> made, MakeMetric(metric.key(), kwargs));
    metrics_.emplace_back(metric.name().empty() ? metric.key() : metric.name(), std::move(made));
  }
  return absl::OkStatus();
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

absl::Status Stage::PreEpoch(int64_t epoch) {
  epoch_ = epoch;
  step_ = 0;
  KD_RETURN_IF_ERROR((*pre_epoch_)(*this, epoch));
  train_loader_->SetEpoch(epoch);
  return absl::OkStatus();
}

absl::Status Stage::PreForward(Batch& batch) {
  ToDevice(batch);
  return (*pre_forward_)(*this, batch);
}

absl::StatusOr<CriterionResult> Stage::Forward(Batch& batch) {
  ToDevice(batch);  // nothing to do after PreForward
  const int64_t step = step_++;
  // A forward that fails names the dataset and the batch, and, for libtorch's shape errors
  // (images of another size than the models take), says so: bad input, not a crash.
  absl::StatusOr<absl::StatusOr<CriterionResult>> forwarded =
      CallTorch([&] { return ForwardModels(batch); }, absl::StatusCode::kInternal);
  if (const absl::Status failed = forwarded.ok() ? forwarded->status() : forwarded.status();
      !failed.ok()) {
    const std::string message(failed.message());
    const std::string first = message.substr(0, message.find('\n'));
    const bool shapes = absl::StrContains(first, "shape") || absl::StrContains(first, "size");
    return absl::Status(
        shapes && failed.code() == absl::StatusCode::kInternal ? absl::StatusCode::kInvalidArgument
                                                               : failed.code(),
        absl::StrCat("stage \"", name_, "\" epoch ", epoch_ + 1, " step ", step + 1,
                     ", a batch of dataset \"", train_dataset_, "\" (samples ",
                     DescribeSamples(batch.samples), "): ", first,
                     shapes ? " (do the dataset's samples have the shape the models take?)" : ""));
  }
  CriterionResult result = *std::move(*forwarded);
  const double loss = result.total.item<double>();
  if (!std::isfinite(loss)) {
    std::vector<std::string> terms;
    for (const TermValue& term : result.terms) {
      terms.push_back(absl::StrCat(term.name, " = ", term.value.item<double>()));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("stage \"", name_, "\" epoch ", epoch_ + 1, " step ", step + 1,
                     ": the loss is ", loss, " (", absl::StrJoin(terms, ", "),
                     "); stopped without saving, the last good checkpoint is kept"));
  }
  return result;
}

absl::StatusOr<double> Stage::TrainEpoch(int64_t epoch, const BoxOptions& options, int log_every,
                                         Profiler* profiler) {
  KD_RETURN_IF_ERROR(PreEpoch(epoch));
  const int64_t steps = train_loader_->num_batches();
  double loss_sum = 0;
  Clock::time_point window = Clock::now();
  int64_t window_samples = 0, window_step = 0;
  BatchStream stream(*train_loader_);  // its workers start assembling batches now
  auto next = [&](Batch& batch) {
    {
      RECORD_USER_SCOPE("data");
      batch = stream.Next();
    }
    return PreForward(batch);
  };
  // The step's batch, with the teacher run ahead on it where the stage's settings say.
  StageTeacher::Epoch batches(stage_teacher_, epoch, steps, next);
  for (int64_t step = 0; step < steps; ++step) {
    KD_ASSIGN_OR_RETURN(Batch batch, batches.Next());
    KD_ASSIGN_OR_RETURN(CriterionResult result, Forward(batch));
    const double loss = result.total.item<double>();
    loss_sum += loss;
    KD_RETURN_IF_ERROR(PostForward(result.total));
    if (profiler != nullptr) KD_RETURN_IF_ERROR(profiler->Step());
    window_samples += BatchSize(batch);
    if (options.on_step && log_every > 0 && (step + 1) % log_every == 0) {
      StepReport report{.stage = name_,
                        .epoch = epoch + 1,
                        .step = step + 1,
                        .steps_per_epoch = steps,
                        .loss = loss};
      for (const TermValue& term : result.terms) {
        report.terms[term.name] = term.value.item<double>();
      }
      report.lr = LearningRates(*optimizer_).at(0);
      const double elapsed = Seconds(window);
      report.samples_per_second = static_cast<double>(window_samples) / elapsed;
      report.seconds_per_step = elapsed / static_cast<double>(step + 1 - window_step);
      window_step = step + 1;
      window = Clock::now();
      window_samples = 0;
      options.on_step(report);
    }
  }
  int64_t count = steps;  // the epoch's loss is the mean over every rank's steps
  if (distributed()) AddAcrossRanks(*group_, device_, loss_sum, count, {});
  return count == 0 ? 0.0 : loss_sum / static_cast<double>(count);
}

absl::Status Stage::SetUpTeacher(const StageConfig& config, const std::string& run_dir) {
  StageTeacher::Parts parts{.model = teacher_,
                            .hooks = &teacher_hooks_,
                            .trains = teacher_trains_,
                            .device = device_,
                            .autocast_dtype = autocast_dtype_};
  if (teacher_ != nullptr) {
    KD_ASSIGN_OR_RETURN(parts.forward, BuildForwardProcFunc(config.teacher()));
  }
  return stage_teacher_.Configure(config, std::move(parts),
                                  {.stage = name_,
                                   .train_dataset = train_dataset_,
                                   .num_transforms = train_loader_->dataset().NumTransforms(),
                                   .run_dir = run_dir,
                                   .distributed = distributed(),
                                   .rank = rank()});
}

absl::StatusOr<c10::IValue> Stage::RunTeacher(const Batch& batch) {
  KD_ASSIGN_OR_RETURN(TeacherValues values, stage_teacher_.ValuesFor(batch));
  teacher_io_ = std::move(values.io);
  // The teacher's auxiliary modules run on its values, from the cache or not: they may train.
  KD_RETURN_IF_ERROR(
      RunAuxiliaryModules(ModelRole::kTeacher, student_->is_training(), aux_, teacher_io_));
  return values.output;
}

absl::StatusOr<c10::IValue> Stage::TeacherOutput(Batch& batch) {
  if (teacher_ == nullptr) {
    return absl::FailedPreconditionError("TeacherOutput: the box has no teacher");
  }
  if (teacher_trains_ && ddp_ != nullptr) {
    return absl::FailedPreconditionError(
        "TeacherOutput: a teacher that trains in a multi-process run forwards only with the "
        "student (Forward), whose backward its gradient reduction awaits");
  }
  ToDevice(batch);
  std::optional<AutocastGuard> autocast;
  Autocast(autocast);
  teacher_io_ = IoDict();
  return WithContext(absl::StrCat("stage \"", name_, "\" teacher"),
                     CallTorchFlat([&] { return RunTeacher(batch); }));
}

absl::StatusOr<CriterionResult> Stage::ForwardModels(const Batch& batch) {
  std::optional<AutocastGuard> autocast;
  Autocast(autocast);
  CriterionInputs in;
  teacher_io_ = IoDict();  // the last forward's, dropped
  student_io_ = IoDict();
  if (blockwise_ != nullptr) {
    std::function<void(const at::Tensor&)> backward;
    if (backward_per_block_ && student_->is_training()) {
      backward = [this](const at::Tensor& loss) { RunBackward(loss); };
    }
    KD_ASSIGN_OR_RETURN(CriterionResult result, blockwise_->Forward(batch.samples, backward));
    backward_done_ = backward != nullptr;
    return result;
  }
  if (ddp_ != nullptr) ddp_->PrepareForward();
  if (teacher_ != nullptr) {
    KD_ASSIGN_OR_RETURN(c10::IValue output, RunTeacher(batch));
    KD_ASSIGN_OR_RETURN(in.teacher_output, OutputTensor(output, "teacher"));
    in.teacher_output_value = output;
    in.teacher_io = &teacher_io_;
    in.teacher_model = teacher_;
  }
  {
    RECORD_USER_SCOPE("student_forward");
    KD_ASSIGN_OR_RETURN(c10::IValue output, (*student_forward_)(*student_, batch));
    KD_ASSIGN_OR_RETURN(student_io_, student_hooks_.PopIoDict());
    KD_RETURN_IF_ERROR(
        RunAuxiliaryModules(ModelRole::kStudent, student_->is_training(), aux_, student_io_));
    KD_ASSIGN_OR_RETURN(in.student_output, OutputTensor(output, "student"));
    in.student_output_value = output;
  }
  in.student_io = &student_io_;
  in.student_model = student_;
  if (batch.targets.isTensor()) in.targets = batch.targets.toTensor();
  in.supp = batch.supp;
  in.epoch = epoch_;
  RECORD_USER_SCOPE("loss");
  KD_ASSIGN_OR_RETURN(CriterionResult result, criterion_->Forward(in));
  // Gradients are averaged across ranks on the steps that step the optimizer; the others
  // accumulate locally (DDP's no_sync).
  if (ddp_ != nullptr && student_->is_training() && (grad_count_ + 1) % grad_accum_step_ == 0) {
    ddp_->PrepareBackward({result.total});
  }
  return result;
}

std::unique_ptr<StageRun> NewStage(Model* teacher, Model* student, c10::Device device,
                                   RunConfig::Precision precision,
                                   const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                   double lr_factor) {
  return std::make_unique<Stage>(teacher, student, device, precision, group, lr_factor);
}

}  // namespace boxes_internal
}  // namespace kd
