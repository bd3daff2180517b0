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
  KD_RETURN_IF_ERROR(BuildOptimizer(config, given, previous));
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
