#include "distill/boxes/internal/stage.h"

#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/ivalue_util.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "distill/boxes/amp.h"
#include "distill/boxes/distributed/ddp.h"
#include "distill/boxes/internal/stage_setup.h"
#include "distill/boxes/io_util.h"
#include "distill/boxes/metrics/metrics.h"
#include "distill/boxes/optim/optim.h"
#include "distill/config/kwargs.h"
#include "distill/data/data_loader.h"
#include "distill/losses/criterion.h"
#include "distill/procs/proc_func.h"
#include "distill/procs/training_context.h"
#include "hooks/forward_hook_manager.h"
#include "memdiag/leak_detection.h"
#include "memdiag/tracking_allocator.h"

namespace kd {
namespace box_internal {
namespace {

// "float32[32, 1, 28, 28]" for a batch's samples tensor, its kind otherwise.
std::string DescribeSamples(const c10::IValue& samples) {
  if (!samples.isTensor()) return samples.tagKind();
  const at::Tensor& t = samples.toTensor();
  return absl::StrCat(c10::toString(t.scalar_type()), ShapeString(t));
}

// A stage of a box: what torchdistill's box holds for the current stage.
class Stage final : public StageRun, public TrainingContext {
 public:
  Stage(Model* teacher, Model* student, c10::Device device, RunConfig::Precision precision,
        c10::intrusive_ptr<c10d::ProcessGroup> group)
      : teacher_(teacher),
        student_(student),
        device_(device),
        group_(std::move(group)),
        teacher_hooks_(device),
        student_hooks_(device) {
    if (precision == RunConfig::BF16) autocast_dtype_ = at::kBFloat16;
    if (precision == RunConfig::FP16) {
      autocast_dtype_ = at::kHalf;
      scaler_ = std::make_unique<GradScaler>(device);
    }
  }

  // Builds everything of `config` (`previous` for what a later stage may leave
  // unset).
  absl::Status Build(const StageConfig& config, const StageConfig* previous,
                     const std::map<std::string, std::shared_ptr<Dataset>>& datasets,
                     const EvaluationConfig& evaluation, int64_t seed) override {
    config_ = config;
    name_ = config.name();
    const bool with_teacher = teacher_ != nullptr;
    // Models: requires_grad and frozen modules.
    teacher_trains_ =
        with_teacher && config.teacher().has_requires_grad() && config.teacher().requires_grad();
    aux_.clear();
    KD_RETURN_IF_ERROR(
        AddAuxiliaryModules(config.student(), ModelRole::kStudent, "student", device_, aux_));
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
        InFieldIfError("student", WrapModel(*student_, config.student(), device_, distributed())));
    if (with_teacher) {
      KD_RETURN_IF_ERROR(InFieldIfError(
          "teacher", WrapModel(*teacher_, config.teacher(), device_, distributed())));
    }
    // Hooks.
    KD_RETURN_IF_ERROR(AddStageHooks(teacher_hooks_, teacher_, config.teacher(), "teacher"));
    KD_RETURN_IF_ERROR(AddStageHooks(student_hooks_, student_, config.student(), "student"));
    // Loss.
    absl::StatusOr<Criterion> criterion = Criterion::FromConfig(config.criterion());
    if (!criterion.ok()) return InField("criterion", criterion.status());
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
    KD_ASSIGN_OR_RETURN(train_loader_, MakeLoader(train, datasets, seed, "train_data_loader",
                                                  world_size(), rank()));
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
    KD_RETURN_IF_ERROR(WrapForDataParallel(config, own));
    KD_ASSIGN_OR_RETURN(
        std::vector<ParamGroup> groups,
        BuildParamGroups(optimizer, student_, teacher_, teacher_trains_, std::move(own)));
    params_.clear();
    for (const ParamGroup& group : groups) {
      params_.insert(params_.end(), group.params.begin(), group.params.end());
    }
    KD_ASSIGN_OR_RETURN(Kwargs opt_kwargs,
                        PluginKwargs(OptimizerRegistry(), optimizer.key(), optimizer.kwargs(),
                                     absl::StrCat("optimizer \"", optimizer.key(), "\"")));
    absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> made =
        MakeOptimizer(optimizer.key(), std::move(groups), opt_kwargs);
    if (!made.ok()) return InField("optimizer", made.status());
    optimizer_ = *std::move(made);
    max_grad_norm_ = optimizer.has_max_grad_norm()
                         ? std::optional<double>(optimizer.max_grad_norm())
                         : std::nullopt;
    grad_accum_step_ = std::max(1, optimizer.grad_accum_step());
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
    if (with_teacher) {
      KD_ASSIGN_OR_RETURN(teacher_forward_, BuildForwardProcFunc(config.teacher()));
    }
    // Leak detection in the validation loop (memdiag).
    leaks_ = {};
    if (evaluation.has_memory_leak_detection()) {
      KD_ASSIGN_OR_RETURN(leaks_, MakeLeakDetection(evaluation.memory_leak_detection(), device_,
                                                    *student_, teacher_, *optimizer_));
    }
    // Metrics.
    for (const MetricConfig& metric : evaluation.metrics()) {
      KD_ASSIGN_OR_RETURN(Kwargs kwargs,
                          PluginKwargs(MetricRegistry(), metric.key(), metric.kwargs(),
                                       absl::StrCat("metric \"", metric.key(), "\"")));
      KD_ASSIGN_OR_RETURN(std::unique_ptr<Metric> made, MakeMetric(metric.key(), kwargs));
      metrics_.emplace_back(metric.name().empty() ? metric.key() : metric.name(), std::move(made));
    }
    return absl::OkStatus();
  }

  // DISTRIBUTED_DATA_PARALLEL in a multi-process run, as torchdistill's wrap_model: each
  // wrapped model that trains (the teacher only with requires_grad), with what trains beside
  // them (`own`: auxiliary modules, the losses' parameters, which Python's DDP would hold inside
  // the wrapped model), kept in sync by one Reducer.
  absl::Status WrapForDataParallel(const StageConfig& config, const std::vector<at::Tensor>& own) {
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
    if (!ddp.ok()) return InField("wrapper", ddp.status());
    ddp_ = *std::move(ddp);
    return absl::OkStatus();
  }

  // TrainingContext.
  Model* model(ModelRole role) override {
    return role == ModelRole::kTeacher ? teacher_ : student_;
  }
  void ClearIo(ModelRole role) override {
    (role == ModelRole::kTeacher ? teacher_hooks_ : student_hooks_).ClearIoDict();
  }
  bool distributed() const override { return group_.defined(); }
  void SetSamplerEpoch(int64_t) override {}
  void Barrier() override {
    if (distributed()) group_->barrier()->wait();
  }
  int64_t IncrementStageGradCount() override { return ++grad_count_; }
  int64_t grad_accum_step() const override { return grad_accum_step_; }
  std::optional<double> max_grad_norm() const override { return max_grad_norm_; }
  void Backward(const at::Tensor& loss) override {
    RECORD_USER_SCOPE("backward");
    (scaler_ != nullptr ? scaler_->Scale(loss) : loss).backward();
  }
  void ClipGradNorm(double max_norm) override {
    if (scaler_ != nullptr) scaler_->Unscale(*optimizer_);
    torch::nn::utils::clip_grad_norm_(params_, max_norm);
  }
  void OptimizerStep() override {
    RECORD_USER_SCOPE("optimizer_step");
    if (scaler_ == nullptr) {
      optimizer_->step();
      return;
    }
    scaler_->Step(*optimizer_);  // skipped on inf/NaN gradients
    scaler_->Update();
  }
  void ZeroGrad() override { optimizer_->zero_grad(/*set_to_none=*/true); }
  bool has_scheduler() const override { return scheduler_ != nullptr; }
  int64_t scheduling_step() const override { return scheduling_step_; }
  void SchedulerStep(const SchedulerStepArgs& args) override {
    if (scheduler_ != nullptr) scheduler_->Step(args);
  }
  void AuxiliaryPostEpoch(ModelRole) override {}

  // One epoch of training (epoch counts from 0); the mean loss.
  absl::StatusOr<double> TrainEpoch(int64_t epoch, const BoxOptions& options, int log_every,
                                    Profiler* profiler) override {
    KD_RETURN_IF_ERROR((*pre_epoch_)(*this, epoch));
    train_loader_->SetEpoch(epoch);
    const int64_t steps = train_loader_->num_batches();
    double loss_sum = 0;
    Clock::time_point window = Clock::now();
    int64_t window_samples = 0, window_step = 0;
    BatchStream batches(*train_loader_);  // its workers start assembling batches now
    for (int64_t step = 0; step < steps; ++step) {
      Batch batch;
      {
        RECORD_USER_SCOPE("data");
        batch = batches.Next();
        ToDevice(batch);
      }
      KD_RETURN_IF_ERROR((*pre_forward_)(*this, batch));
      // A forward that fails names the dataset and the batch, and, for libtorch's shape errors
      // (images of another size than the models take), says so: bad input, not a crash.
      absl::StatusOr<absl::StatusOr<CriterionResult>> forwarded =
          CallTorch([&] { return Forward(batch); }, absl::StatusCode::kInternal);
      if (const absl::Status failed = forwarded.ok() ? forwarded->status() : forwarded.status();
          !failed.ok()) {
        const std::string message(failed.message());
        const std::string first = message.substr(0, message.find('\n'));
        const bool shapes = absl::StrContains(first, "shape") || absl::StrContains(first, "size");
        return absl::Status(
            shapes && failed.code() == absl::StatusCode::kInternal
                ? absl::StatusCode::kInvalidArgument
                : failed.code(),
            absl::StrCat(
                "stage \"", name_, "\" epoch ", epoch + 1, " step ", step + 1,
                ", a batch of dataset \"", train_dataset_, "\" (samples ",
                DescribeSamples(batch.samples), "): ", first,
                shapes ? " (do the dataset's samples have the shape the models take?)" : ""));
      }
      KD_ASSIGN_OR_RETURN(CriterionResult result, *std::move(forwarded));
      const double loss = result.total.item<double>();
      if (!std::isfinite(loss)) {
        std::vector<std::string> terms;
        for (const TermValue& term : result.terms) {
          terms.push_back(absl::StrCat(term.name, " = ", term.value.item<double>()));
        }
        return absl::FailedPreconditionError(
            absl::StrCat("stage \"", name_, "\" epoch ", epoch + 1, " step ", step + 1,
                         ": the loss is ", loss, " (", absl::StrJoin(terms, ", "),
                         "); stopped without saving, the last good "
                         "checkpoint is kept"));
      }
      loss_sum += loss;
      KD_RETURN_IF_ERROR((*post_forward_)(*this, result.total, std::nullopt));
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

  // The validation loss and metrics of the student (empty without a validation loader).
  absl::StatusOr<std::map<std::string, double>> Evaluate() override {
    if (val_loader_ == nullptr) return std::map<std::string, double>();
    return EvaluateOn(*val_loader_);
  }

  absl::StatusOr<std::map<std::string, double>> Test(
      const LoaderConfig& loader, const std::map<std::string, std::shared_ptr<Dataset>>& datasets,
      int64_t seed) override {
    KD_ASSIGN_OR_RETURN(std::unique_ptr<DataLoader> test,
                        MakeLoader(loader, datasets, seed, "test_data_loader", world_size(), rank(),
                                   /*exact_shards=*/true));
    return EvaluateOn(*test);
  }

  absl::StatusOr<std::map<std::string, double>> EvaluateOn(DataLoader& loader) {
    RECORD_USER_SCOPE("eval");
    std::map<std::string, double> out;
    const bool was_training = student_->is_training();
    student_->SetTraining(false);
    at::NoGradGuard no_grad;
    for (auto& [name, metric] : metrics_) metric->Reset();
    double loss_sum = 0;
    int64_t count = 0;
    loader.SetEpoch(0);
    BatchStream batches(loader);
    for (int64_t i = 0; i < loader.num_batches(); ++i) {
      if (leaks_.callback != nullptr) leaks_.callback->OnPredictionStep();
      ScopedMemoryAnnotation scope("eval", i + 1);
      Batch batch = batches.Next();
      ToDevice(batch);
      std::optional<AutocastGuard> autocast;
      Autocast(autocast);
      KD_ASSIGN_OR_RETURN(c10::IValue output, (*student_forward_)(*student_, batch));
      student_hooks_.ClearIoDict();
      if (!output.isTensor() || !batch.targets.isTensor()) {
        return absl::InvalidArgumentError(
            "evaluation needs a tensor output (logits) and tensor targets");
      }
      const at::Tensor logits = output.toTensor(), targets = batch.targets.toTensor();
      loss_sum += at::cross_entropy_loss(logits, targets, {}, at::Reduction::Sum).item<double>();
      count += targets.size(0);
      for (auto& [name, metric] : metrics_) metric->Update(logits, targets);
    }
    if (leaks_.callback != nullptr) leaks_.callback->OnEvaluate();
    if (distributed()) AddAcrossRanks(*group_, device_, loss_sum, count, metrics_);
    out["loss"] = count == 0 ? 0.0 : loss_sum / static_cast<double>(count);
    for (auto& [name, metric] : metrics_) out[name] = metric->Value();
    student_->SetTraining(was_training);
    return out;
  }

  int64_t world_size() const { return distributed() ? group_->getSize() : 1; }
  int64_t rank() const { return distributed() ? group_->getRank() : 0; }

  absl::Status PostEpoch(std::optional<double> metric) override {
    return (*post_epoch_)(*this, metric);
  }

  // What a checkpoint keeps of this stage.
  void SaveTo(c10::impl::GenericDict& dict) const override {
    torch::serialize::OutputArchive archive;
    optimizer_->save(archive);
    std::ostringstream bytes;
    archive.save_to(bytes);
    dict.insert("optimizer", BytesTensor(bytes.str()));
    dict.insert("optimizer_kind", OptimizerKind(*optimizer_));
    dict.insert("optimizer_groups", c10::List<int64_t>(ParamGroupSizes(*optimizer_)));
    c10::List<double> scheduler;
    if (scheduler_ != nullptr) {
      for (double v : scheduler_->State()) scheduler.push_back(v);
    }
    dict.insert("scheduler", scheduler);
    dict.insert("grad_count", grad_count_);
    c10::impl::GenericDict loss_state(c10::StringType::get(), c10::TensorType::get());
    for (const auto& [name, tensor] : criterion_->NamedState()) {
      loss_state.insert(name, tensor.detach().cpu());
    }
    dict.insert("loss_state", loss_state);
    if (scaler_ != nullptr) dict.insert("grad_scaler", c10::List<double>(scaler_->State()));
    c10::impl::GenericDict aux(c10::StringType::get(), c10::TensorType::get());
    for (const auto& [name, tensor] : AuxTensors(aux_)) aux.insert(name, tensor.detach().cpu());
    dict.insert("auxiliary_modules", aux);
  }

  absl::Status LoadFrom(const c10::impl::GenericDict& dict) override {
    // The optimizer's kind and layout first: libtorch's own load of another optimizer's state
    // stops on an internal assert ("report a bug to PyTorch"). Checkpoints written before these
    // keys existed skip the check.
    if (dict.contains("optimizer_kind")) {
      const std::string saved = dict.at("optimizer_kind").toStringRef();
      if (saved != OptimizerKind(*optimizer_)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the checkpoint's optimizer is ", saved, ", the config's ", OptimizerKind(*optimizer_),
            ": resume with the optimizer it was saved with, or start a fresh run (--overwrite)"));
      }
    }
    if (dict.contains("optimizer_groups")) {
      const std::vector<int64_t> saved = dict.at("optimizer_groups").toIntVector();
      const std::vector<int64_t> mine = ParamGroupSizes(*optimizer_);
      if (saved != mine) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the checkpoint's optimizer has parameter groups of ", absl::StrJoin(saved, ", "),
            " parameters, the config's ", absl::StrJoin(mine, ", "),
            " (param_groups, frozen modules or the model changed since): resume with the config "
            "it was saved with, or start a fresh run (--overwrite)"));
      }
    }
    std::istringstream bytes(TensorBytes(dict.at("optimizer").toTensor()));
    torch::serialize::InputArchive archive;
    try {
      archive.load_from(bytes);
      optimizer_->load(archive);
    } catch (const c10::Error& error) {
      const std::string text = error.what_without_backtrace();
      return absl::InvalidArgumentError(absl::StrCat(
          "the checkpoint's optimizer state cannot be read (", text.substr(0, text.find('\n')),
          "): the checkpoint is damaged; resume from another, or start a fresh run"));
    }
    if (scheduler_ != nullptr) scheduler_->LoadState(dict.at("scheduler").toDoubleVector());
    grad_count_ = dict.at("grad_count").toInt();
    if (dict.contains("auxiliary_modules")) {
      const c10::impl::GenericDict saved = dict.at("auxiliary_modules").toGenericDict();
      at::NoGradGuard no_grad;
      for (auto& [name, tensor] : AuxTensors(aux_)) {
        auto it = saved.find(name);
        if (it == saved.end()) {
          return absl::InvalidArgumentError(absl::StrCat("the checkpoint has no \"", name,
                                                         "\" (auxiliary modules changed since?)"));
        }
        tensor.copy_(it->value().toTensor());
      }
    }
    if (scaler_ != nullptr && dict.contains("grad_scaler")) {
      scaler_->LoadState(dict.at("grad_scaler").toDoubleVector());
    }
    const c10::impl::GenericDict loss_state = dict.at("loss_state").toGenericDict();
    at::NoGradGuard no_grad;
    for (const auto& [name, tensor] : criterion_->NamedState()) {
      auto it = loss_state.find(name);
      if (it != loss_state.end()) {
        at::Tensor target = tensor;
        target.copy_(it->value().toTensor());
      }
    }
    return absl::OkStatus();
  }

  const std::string& name() const override { return name_; }
  const StageConfig& config() const override { return config_; }
  double lr() const override { return LearningRates(*optimizer_).at(0); }
  int64_t train_samples_per_epoch() const override {
    // The loader's batch size: a later stage may inherit the loader from an
    // earlier one.
    return train_loader_->num_batches() * train_loader_->options().batch_size;
  }

 private:
  void ToDevice(Batch& batch) const {
    if (device_.is_cpu()) return;
    batch.samples = kd::ToDevice(batch.samples, device_);
    batch.targets = kd::ToDevice(batch.targets, device_);
  }

  // Starts autocast in `guard` for this stage's precision (nothing for FP32).
  void Autocast(std::optional<AutocastGuard>& guard) const {
    if (autocast_dtype_.has_value()) guard.emplace(device_.type(), *autocast_dtype_);
  }

  absl::StatusOr<CriterionResult> Forward(const Batch& batch) {
    std::optional<AutocastGuard> autocast;
    Autocast(autocast);
    CriterionInputs in;
    IoDict teacher_io, student_io;
    if (ddp_ != nullptr) ddp_->PrepareForward();
    if (teacher_ != nullptr) {
      RECORD_USER_SCOPE("teacher_forward");
      c10::IValue output;
      if (teacher_trains_) {
        KD_ASSIGN_OR_RETURN(output, (*teacher_forward_)(*teacher_, batch));
      } else {
        at::NoGradGuard no_grad;
        KD_ASSIGN_OR_RETURN(output, (*teacher_forward_)(*teacher_, batch));
      }
      KD_ASSIGN_OR_RETURN(teacher_io, teacher_hooks_.PopIoDict());
      KD_RETURN_IF_ERROR(
          RunAuxiliaryModules(ModelRole::kTeacher, student_->is_training(), aux_, teacher_io));
      KD_ASSIGN_OR_RETURN(in.teacher_output, OutputTensor(output, "teacher"));
      in.teacher_io = &teacher_io;
      in.teacher_model = teacher_;
    }
    {
      RECORD_USER_SCOPE("student_forward");
      KD_ASSIGN_OR_RETURN(c10::IValue output, (*student_forward_)(*student_, batch));
      KD_ASSIGN_OR_RETURN(student_io, student_hooks_.PopIoDict());
      KD_RETURN_IF_ERROR(
          RunAuxiliaryModules(ModelRole::kStudent, student_->is_training(), aux_, student_io));
      KD_ASSIGN_OR_RETURN(in.student_output, OutputTensor(output, "student"));
    }
    in.student_io = &student_io;
    in.student_model = student_;
    if (batch.targets.isTensor()) in.targets = batch.targets.toTensor();
    RECORD_USER_SCOPE("loss");
    KD_ASSIGN_OR_RETURN(CriterionResult result, criterion_->Forward(in));
    // Gradients are averaged across ranks on the steps that step the optimizer; the others
    // accumulate locally (DDP's no_sync).
    if (ddp_ != nullptr && student_->is_training() && (grad_count_ + 1) % grad_accum_step_ == 0) {
      ddp_->PrepareBackward({result.total});
    }
    return result;
  }

  Model* teacher_;
  Model* student_;
  c10::Device device_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;  // null: one process
  std::unique_ptr<DataParallel> ddp_;             // the wrapped models', in a multi-process run
  ForwardHookManager teacher_hooks_, student_hooks_;
  StageConfig config_;
  std::string name_;
  bool teacher_trains_ = false;
  std::unique_ptr<Criterion> criterion_;
  std::unique_ptr<DataLoader> train_loader_, val_loader_;
  std::string train_dataset_;  // the training loader's dataset id, for messages
  std::vector<at::Tensor> params_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<LrScheduler> scheduler_;
  int64_t scheduling_step_ = 0;
  std::optional<double> max_grad_norm_;
  int64_t grad_accum_step_ = 1;
  int64_t grad_count_ = 0;
  // Optional only because they have no default constructor: Build sets them.
  std::optional<ProcFunc<PreEpochProc>> pre_epoch_;
  std::optional<ProcFunc<PreForwardProc>> pre_forward_;
  std::optional<ProcFunc<PostForwardProc>> post_forward_;
  std::optional<ProcFunc<PostEpochProc>> post_epoch_;
  std::optional<ProcFunc<ForwardProc>> student_forward_, teacher_forward_;
  std::vector<std::pair<std::string, std::unique_ptr<Metric>>> metrics_;
  std::vector<AuxModule> aux_;
  LeakDetection leaks_;                           // memdiag's, when the evaluation asks for it
  std::optional<at::ScalarType> autocast_dtype_;  // run.precision BF16 / FP16
  std::unique_ptr<GradScaler> scaler_;            // FP16 only
};

}  // namespace

std::unique_ptr<StageRun> NewStage(Model* teacher, Model* student, c10::Device device,
                                   RunConfig::Precision precision,
                                   const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  return std::make_unique<Stage>(teacher, student, device, precision, group);
}

}  // namespace box_internal
}  // namespace kd
