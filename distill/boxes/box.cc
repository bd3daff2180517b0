#include "distill/boxes/box.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "base/torch_file.h"
#include "base/torch_status.h"
#include "distill/boxes/io_util.h"
#include "distill/boxes/metrics.h"
#include "distill/boxes/optim.h"
#include "distill/config/kwargs.h"
#include "distill/data/data_loader.h"
#include "distill/data/dataset.h"
#include "distill/losses/criterion.h"
#include "distill/models/model_registry.h"
#include "distill/procs/proc_func.h"
#include "distill/procs/training_context.h"
#include "hooks/forward_hook_manager.h"
#include "hooks/torchscript_model.h"

namespace kd {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

absl::Status InField(absl::string_view field, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(field, ": ", status.message()));
}

std::string Resolve(const std::string& base, const std::string& path) {
  if (path.empty() || base.empty() || fs::path(path).is_absolute()) return path;
  return (fs::path(base) / path).string();
}

absl::StatusOr<std::unique_ptr<Model>> LoadModel(const ModelConfig& config,
                                                 const std::string& base, const char* role) {
  std::unique_ptr<Model> model;
  if (config.has_native()) {
    const PluginConfig& native = config.native();
    KD_ASSIGN_OR_RETURN(Kwargs kwargs,
                        PluginKwargs(ModelRegistry(), native.key(), native.kwargs(),
                                     absl::StrCat("model \"", native.key(), "\"")));
    absl::StatusOr<std::unique_ptr<Model>> made = MakeRegisteredModel(native.key(), kwargs);
    if (!made.ok()) return InField(absl::StrCat(role, ".native"), made.status());
    model = *std::move(made);
  } else if (!config.torchscript().empty()) {
    absl::StatusOr<std::unique_ptr<Model>> loaded =
        LoadTorchScriptModel(Resolve(base, config.torchscript()));
    if (!loaded.ok()) return InField(absl::StrCat(role, ".torchscript"), loaded.status());
    model = *std::move(loaded);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(role, ": no source (set torchscript or native)"));
  }
  if (!config.src_ckpt().empty()) {
    absl::Status loaded = model->LoadState(Resolve(base, config.src_ckpt()));
    if (!loaded.ok()) return InField(absl::StrCat(role, ".src_ckpt"), loaded);
  }
  return model;
}

// The tensors of `model` (parameters, then buffers) as a dict path -> tensor, for checkpoints.
c10::impl::GenericDict StateDict(const Model& model) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::TensorType::get());
  for (const auto& list : {model.NamedParameters(), model.NamedBuffers()}) {
    for (const auto& [name, tensor] : list) dict.insert(name, tensor.detach().cpu());
  }
  return dict;
}

absl::Status LoadStateDict(Model& model, const c10::IValue& value, absl::string_view what) {
  if (!value.isGenericDict()) return absl::InvalidArgumentError(absl::StrCat(what, ": not a dict"));
  const c10::impl::GenericDict dict = value.toGenericDict();
  at::NoGradGuard no_grad;
  for (const auto& list : {model.NamedParameters(), model.NamedBuffers()}) {
    for (const auto& [name, tensor] : list) {
      auto it = dict.find(name);
      if (it == dict.end()) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": no tensor \"", name, "\""));
      }
      at::Tensor saved = it->value().toTensor();
      if (!saved.sizes().equals(tensor.sizes())) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": \"", name, "\" is ",
                                                       ShapeString(saved), ", the model's ",
                                                       ShapeString(tensor)));
      }
      at::Tensor target = tensor;
      target.copy_(saved);
    }
  }
  return absl::OkStatus();
}

at::Tensor BytesTensor(const std::string& bytes) {
  at::Tensor t = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

std::string TensorBytes(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel());
}

// A stage of a box: what torchdistill's box holds for the current stage.
class Stage final : public TrainingContext {
 public:
  Stage(Model* teacher, Model* student, c10::Device device)
      : teacher_(teacher), student_(student), device_(device),
        teacher_hooks_(device), student_hooks_(device) {}

  // Builds everything of `config` (`previous` for what a later stage may leave unset).
  absl::Status Build(const StageConfig& config, const StageConfig* previous,
                     const std::map<std::string, std::shared_ptr<Dataset>>& datasets,
                     const EvaluationConfig& evaluation, int64_t seed) {
    config_ = config;
    name_ = config.name();
    const bool with_teacher = teacher_ != nullptr;
    // Models: requires_grad and frozen modules.
    teacher_trains_ = with_teacher && config.teacher().has_requires_grad() &&
                      config.teacher().requires_grad();
    if (!config.teacher().auxiliary_modules().empty() ||
        !config.student().auxiliary_modules().empty()) {
      return absl::UnimplementedError(
          "auxiliary_modules are not supported by libkd's boxes yet (a loss that owns its "
          "projection, such as FitNetLoss or contrastive, does the same job)");
    }
    KD_RETURN_IF_ERROR(SetRequiresGrad(*student_, config.student(), true, "student"));
    if (with_teacher) {
      KD_RETURN_IF_ERROR(SetRequiresGrad(*teacher_, config.teacher(), false, "teacher"));
    }
    // Hooks.
    KD_RETURN_IF_ERROR(AddHooks(teacher_hooks_, teacher_, config.teacher(), "teacher"));
    KD_RETURN_IF_ERROR(AddHooks(student_hooks_, student_, config.student(), "student"));
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
    KD_ASSIGN_OR_RETURN(train_loader_, MakeLoader(train, datasets, seed, "train_data_loader"));
    if (!val.dataset_id().empty()) {
      KD_ASSIGN_OR_RETURN(val_loader_, MakeLoader(val, datasets, seed, "val_data_loader"));
    }
    // Optimizer over what trains, and the loss's own parameters.
    const OptimizerConfig& optimizer = config.has_optimizer() || previous == nullptr
                                           ? config.optimizer()
                                           : previous->optimizer();
    if (!optimizer.param_groups().empty()) {
      return absl::UnimplementedError("optimizer.param_groups are not supported yet");
    }
    params_.clear();
    for (Model* model : {student_, teacher_trains_ ? teacher_ : nullptr}) {
      if (model == nullptr) continue;
      for (const auto& [name, p] : model->NamedParameters()) {
        if (p.requires_grad()) params_.push_back(p);
      }
    }
    for (const at::Tensor& p : criterion_->Parameters()) params_.push_back(p);
    KD_ASSIGN_OR_RETURN(Kwargs opt_kwargs,
                        PluginKwargs(OptimizerRegistry(), optimizer.key(), optimizer.kwargs(),
                                     absl::StrCat("optimizer \"", optimizer.key(), "\"")));
    KD_ASSIGN_OR_RETURN(optimizer_, MakeOptimizer(optimizer.key(), params_, opt_kwargs));
    max_grad_norm_ = optimizer.has_max_grad_norm() ? std::optional<double>(optimizer.max_grad_norm())
                                                   : std::nullopt;
    grad_accum_step_ = std::max(1, optimizer.grad_accum_step());
    const SchedulerConfig& scheduler = config.has_scheduler() || previous == nullptr
                                           ? config.scheduler()
                                           : previous->scheduler();
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
    // Metrics.
    for (const MetricConfig& metric : evaluation.metrics()) {
      KD_ASSIGN_OR_RETURN(Kwargs kwargs,
                          PluginKwargs(MetricRegistry(), metric.key(), metric.kwargs(),
                                       absl::StrCat("metric \"", metric.key(), "\"")));
      KD_ASSIGN_OR_RETURN(std::unique_ptr<Metric> made, MakeMetric(metric.key(), kwargs));
      metrics_.emplace_back(metric.name().empty() ? metric.key() : metric.name(),
                            std::move(made));
    }
    return absl::OkStatus();
  }

  // TrainingContext.
  Model* model(ModelRole role) override {
    return role == ModelRole::kTeacher ? teacher_ : student_;
  }
  void ClearIo(ModelRole role) override {
    (role == ModelRole::kTeacher ? teacher_hooks_ : student_hooks_).ClearIoDict();
  }
  bool distributed() const override { return false; }
  void SetSamplerEpoch(int64_t) override {}
  void Barrier() override {}
  int64_t IncrementStageGradCount() override { return ++grad_count_; }
  int64_t grad_accum_step() const override { return grad_accum_step_; }
  std::optional<double> max_grad_norm() const override { return max_grad_norm_; }
  void Backward(const at::Tensor& loss) override { loss.backward(); }
  void ClipGradNorm(double max_norm) override {
    torch::nn::utils::clip_grad_norm_(params_, max_norm);
  }
  void OptimizerStep() override { optimizer_->step(); }
  void ZeroGrad() override { optimizer_->zero_grad(/*set_to_none=*/true); }
  bool has_scheduler() const override { return scheduler_ != nullptr; }
  int64_t scheduling_step() const override { return scheduling_step_; }
  void SchedulerStep(const SchedulerStepArgs& args) override {
    if (scheduler_ != nullptr) scheduler_->Step(args);
  }
  void AuxiliaryPostEpoch(ModelRole) override {}

  // One epoch of training (epoch counts from 0); the mean loss.
  absl::StatusOr<double> TrainEpoch(int64_t epoch, const BoxOptions& options,
                                    int64_t num_epochs, int log_every) {
    KD_RETURN_IF_ERROR((*pre_epoch_)(*this, epoch));
    train_loader_->SetEpoch(epoch);
    const int64_t steps = train_loader_->num_batches();
    double loss_sum = 0;
    Clock::time_point window = Clock::now();
    int64_t window_samples = 0, window_step = 0;
    for (int64_t step = 0; step < steps; ++step) {
      Batch batch = train_loader_->GetBatch(step);
      ToDevice(batch);
      KD_RETURN_IF_ERROR((*pre_forward_)(*this, batch));
      KD_ASSIGN_OR_RETURN(CriterionResult result, Forward(batch));
      const double loss = result.total.item<double>();
      if (!std::isfinite(loss)) {
        std::vector<std::string> terms;
        for (const TermValue& term : result.terms) {
          terms.push_back(absl::StrCat(term.name, " = ", term.value.item<double>()));
        }
        return absl::FailedPreconditionError(absl::StrCat(
            "stage \"", name_, "\" epoch ", epoch + 1, " step ", step + 1, ": the loss is ",
            loss, " (", absl::StrJoin(terms, ", "), "); stopped without saving, the last good "
            "checkpoint is kept"));
      }
      loss_sum += loss;
      KD_RETURN_IF_ERROR((*post_forward_)(*this, result.total, std::nullopt));
      window_samples += BatchSize(batch);
      if (options.on_step && log_every > 0 && (step + 1) % log_every == 0) {
        StepReport report{.stage = name_, .epoch = epoch + 1, .step = step + 1,
                          .steps_per_epoch = steps, .loss = loss};
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
    (void)num_epochs;
    return steps == 0 ? 0.0 : loss_sum / static_cast<double>(steps);
  }

  // The validation loss and metrics of the student (empty without a validation loader).
  absl::StatusOr<std::map<std::string, double>> Evaluate() {
    std::map<std::string, double> out;
    if (val_loader_ == nullptr) return out;
    const bool was_training = student_->is_training();
    student_->SetTraining(false);
    at::NoGradGuard no_grad;
    for (auto& [name, metric] : metrics_) metric->Reset();
    double loss_sum = 0;
    int64_t count = 0;
    val_loader_->SetEpoch(0);
    for (int64_t i = 0; i < val_loader_->num_batches(); ++i) {
      Batch batch = val_loader_->GetBatch(i);
      ToDevice(batch);
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
    out["loss"] = count == 0 ? 0.0 : loss_sum / static_cast<double>(count);
    for (auto& [name, metric] : metrics_) out[name] = metric->Value();
    student_->SetTraining(was_training);
    return out;
  }

  absl::Status PostEpoch(std::optional<double> metric) { return (*post_epoch_)(*this, metric); }

  // What a checkpoint keeps of this stage.
  void SaveTo(c10::impl::GenericDict& dict) const {
    torch::serialize::OutputArchive archive;
    optimizer_->save(archive);
    std::ostringstream bytes;
    archive.save_to(bytes);
    dict.insert("optimizer", BytesTensor(bytes.str()));
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
  }

  absl::Status LoadFrom(const c10::impl::GenericDict& dict) {
    std::istringstream bytes(TensorBytes(dict.at("optimizer").toTensor()));
    torch::serialize::InputArchive archive;
    archive.load_from(bytes);
    optimizer_->load(archive);
    if (scheduler_ != nullptr) scheduler_->LoadState(dict.at("scheduler").toDoubleVector());
    grad_count_ = dict.at("grad_count").toInt();
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

  const std::string& name() const { return name_; }
  const StageConfig& config() const { return config_; }
  double lr() const { return LearningRates(*optimizer_).at(0); }
  int64_t train_samples_per_epoch() const {
    return train_loader_->num_batches() * config_.train_data_loader().batch_size();
  }
  std::vector<std::pair<std::string, at::Tensor>> loss_state() const {
    return criterion_->NamedState();
  }

 private:
  absl::StatusOr<std::unique_ptr<DataLoader>> MakeLoader(
      const LoaderConfig& loader, const std::map<std::string, std::shared_ptr<Dataset>>& datasets,
      int64_t seed, const char* field) {
    auto it = datasets.find(loader.dataset_id());
    if (it == datasets.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": no dataset \"", loader.dataset_id(), "\""));
    }
    DataLoaderOptions options;
    options.batch_size = loader.batch_size();
    options.shuffle = loader.shuffle();
    options.drop_last = loader.drop_last();
    options.seed = static_cast<uint64_t>(seed);
    absl::StatusOr<DataLoader> created = DataLoader::Create(it->second, options);
    if (!created.ok()) return InField(field, created.status());
    return std::make_unique<DataLoader>(*std::move(created));
  }

  static absl::Status SetRequiresGrad(Model& model, const StageModelConfig& config,
                                      bool default_value, const char* role) {
    const bool trains = config.has_requires_grad() ? config.requires_grad() : default_value;
    for (const std::string& path : config.frozen_modules()) {
      if (absl::Status found = model.CheckModulePath(path); !found.ok()) {
        return InField(absl::StrCat(role, ".frozen_modules"), found);
      }
    }
    for (const auto& [name, p] : model.NamedParameters()) {
      bool frozen = !trains;
      for (const std::string& path : config.frozen_modules()) {
        if (path.empty() || name.rfind(path + ".", 0) == 0) frozen = true;
      }
      at::Tensor param = p;
      param.requires_grad_(!frozen);
    }
    return absl::OkStatus();
  }

  static absl::Status AddHooks(ForwardHookManager& hooks, Model* model,
                               const StageModelConfig& config, const char* role) {
    hooks.Clear();
    if (model == nullptr) return absl::OkStatus();
    if (absl::Status set = SetHooks(hooks, *model, config); !set.ok()) return InField(role, set);
    return absl::OkStatus();
  }

  void ToDevice(Batch& batch) const {
    if (device_.is_cpu()) return;
    batch.samples = kd::ToDevice(batch.samples, device_);
    batch.targets = kd::ToDevice(batch.targets, device_);
  }

  static int64_t BatchSize(const Batch& batch) {
    return batch.targets.isTensor() ? batch.targets.toTensor().size(0) : 0;
  }

  absl::StatusOr<at::Tensor> OutputTensor(const c10::IValue& output, const char* role) {
    if (output.isTensor()) return output.toTensor();
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", role, "'s output is a ", output.tagKind(),
        "; the criterion reads tensor outputs (hook a module for the rest)"));
  }

  absl::StatusOr<CriterionResult> Forward(const Batch& batch) {
    CriterionInputs in;
    IoDict teacher_io, student_io;
    if (teacher_ != nullptr) {
      c10::IValue output;
      if (teacher_trains_) {
        KD_ASSIGN_OR_RETURN(output, (*teacher_forward_)(*teacher_, batch));
      } else {
        at::NoGradGuard no_grad;
        KD_ASSIGN_OR_RETURN(output, (*teacher_forward_)(*teacher_, batch));
      }
      KD_ASSIGN_OR_RETURN(teacher_io, teacher_hooks_.PopIoDict());
      KD_ASSIGN_OR_RETURN(in.teacher_output, OutputTensor(output, "teacher"));
      in.teacher_io = &teacher_io;
      in.teacher_model = teacher_;
    }
    KD_ASSIGN_OR_RETURN(c10::IValue output, (*student_forward_)(*student_, batch));
    KD_ASSIGN_OR_RETURN(student_io, student_hooks_.PopIoDict());
    KD_ASSIGN_OR_RETURN(in.student_output, OutputTensor(output, "student"));
    in.student_io = &student_io;
    in.student_model = student_;
    if (batch.targets.isTensor()) in.targets = batch.targets.toTensor();
    return criterion_->Forward(in);
  }

  Model* teacher_;
  Model* student_;
  c10::Device device_;
  ForwardHookManager teacher_hooks_, student_hooks_;
  StageConfig config_;
  std::string name_;
  bool teacher_trains_ = false;
  std::unique_ptr<Criterion> criterion_;
  std::unique_ptr<DataLoader> train_loader_, val_loader_;
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
};

class BoxImpl final : public Box {
 public:
  BoxImpl(DistillConfig config, BoxOptions options)
      : config_(std::move(config)), options_(std::move(options)) {}

  absl::Status Init() {
    stages_.clear();
    if (config_.has_train()) stages_.push_back(config_.train());
    for (const StageConfig& stage : config_.stages()) stages_.push_back(stage);
    if (stages_.empty()) return absl::InvalidArgumentError("no stage: set train or stages");
    for (size_t i = 0; i < stages_.size(); ++i) {
      if (stages_[i].name().empty()) stages_[i].set_name(absl::StrCat("stage", i));
    }
    seed_ = options_.seed.value_or(config_.run().seed());
    const std::string device = options_.device.value_or(
        config_.run().device().empty() ? "cpu" : config_.run().device());
    KD_ASSIGN_OR_RETURN(device_, CallTorch([&] { return c10::Device(device); },
                                           absl::StatusCode::kInvalidArgument));
    run_dir_ = options_.run_dir;
    if (run_dir_.empty()) run_dir_ = config_.run().run_dir();
    if (run_dir_.empty()) {
      run_dir_ = absl::StrCat("runs/", config_.run().name().empty() ? "run" : config_.run().name());
    }
    run_dir_ = Resolve(options_.base_dir, run_dir_);
    ckpt_dir_ = (fs::path(run_dir_) /
                 (config_.checkpoint().dir().empty() ? "ckpt" : config_.checkpoint().dir()))
                    .string();
    at::manual_seed(seed_);
    for (const DatasetConfig& dataset : config_.datasets()) {
      KD_ASSIGN_OR_RETURN(Kwargs kwargs,
                          PluginKwargs(DatasetRegistry(), dataset.key(), dataset.kwargs(),
                                       absl::StrCat("dataset \"", dataset.key(), "\"")));
      absl::StatusOr<std::shared_ptr<Dataset>> made = MakeDataset(dataset.key(), kwargs);
      if (!made.ok()) return InField(absl::StrCat("dataset \"", dataset.id(), "\""), made.status());
      datasets_[dataset.id()] = *std::move(made);
    }
    if (config_.has_teacher()) {
      KD_ASSIGN_OR_RETURN(teacher_, LoadModel(config_.teacher(), options_.base_dir, "teacher"));
      teacher_->To(device_);
    }
    KD_ASSIGN_OR_RETURN(student_, LoadModel(config_.student(), options_.base_dir, "student"));
    student_->To(device_);
    return absl::OkStatus();
  }

  std::string kind() const override {
    const bool multi = stages_.size() > 1 || !config_.stages().empty();
    return absl::StrCat(multi ? "MultiStages" : "", teacher_ ? "DistillationBox" : "TrainingBox");
  }

  absl::StatusOr<RunResult> Run() override {
    const Clock::time_point start = Clock::now();
    RunResult result;
    KD_RETURN_IF_ERROR(CreateDirectories(ckpt_dir_));
    // Where to start: after the last checkpoint's epoch when resuming.
    size_t first_stage = 0;
    int64_t first_epoch = 0;
    std::optional<c10::impl::GenericDict> resume;
    const std::string resume_path =
        !config_.checkpoint().resume_from().empty()
            ? Resolve(options_.base_dir, config_.checkpoint().resume_from())
            : (options_.resume ? LastPath() : "");
    if (!resume_path.empty() && fs::exists(resume_path)) {
      KD_ASSIGN_OR_RETURN(c10::IValue saved, ReadTorchFile(resume_path));
      resume = saved.toGenericDict();
      first_stage = static_cast<size_t>(resume->at("stage").toInt());
      first_epoch = resume->at("epoch").toInt();  // epochs completed in that stage
      best_ = resume->at("best").toDouble();
      KD_RETURN_IF_ERROR(LoadStateDict(*student_, resume->at("student"), resume_path));
      if (teacher_ != nullptr && resume->contains("teacher")) {
        KD_RETURN_IF_ERROR(LoadStateDict(*teacher_, resume->at("teacher"), resume_path));
      }
    } else if (!config_.checkpoint().resume_from().empty()) {
      return absl::NotFoundError(absl::StrCat("checkpoint.resume_from: no file ", resume_path));
    }
    const int log_every =
        config_.run().log_every_n_steps() > 0 ? config_.run().log_every_n_steps() : 50;
    const EvaluationConfig& evaluation = config_.evaluation();
    const std::string primary = !evaluation.primary_metric().empty() ? evaluation.primary_metric()
                                : !evaluation.metrics().empty()
                                    ? (evaluation.metrics(0).name().empty()
                                           ? evaluation.metrics(0).key()
                                           : evaluation.metrics(0).name())
                                    : "loss";
    for (size_t s = first_stage; s < stages_.size(); ++s) {
      Stage stage(teacher_.get(), student_.get(), device_);
      absl::Status built = stage.Build(stages_[s], s > 0 ? &stages_[s - 1] : nullptr, datasets_,
                                       evaluation, seed_);
      if (!built.ok()) return InField(absl::StrCat("stage \"", stages_[s].name(), "\""), built);
      int64_t epoch = 0;
      if (resume.has_value() && s == first_stage) {
        // A checkpoint written at a stage's end starts the next stage afresh.
        if (!resume->contains("fresh_stage")) KD_RETURN_IF_ERROR(stage.LoadFrom(*resume));
        epoch = first_epoch;
        const at::Tensor rng = resume->at("rng").toTensor();
        at::Generator generator = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(generator.mutex());
        generator.set_state(rng);
      }
      const int64_t num_epochs = stages_[s].num_epochs();
      for (; epoch < num_epochs; ++epoch) {
        const Clock::time_point epoch_start = Clock::now();
        KD_ASSIGN_OR_RETURN(double train_loss,
                            stage.TrainEpoch(epoch, options_, num_epochs, log_every));
        const double train_seconds = Seconds(epoch_start);
        const int every = std::max(1, evaluation.every_n_epochs());
        std::map<std::string, double> metrics;
        if ((epoch + 1) % every == 0 || epoch + 1 == num_epochs) {
          KD_ASSIGN_OR_RETURN(metrics, stage.Evaluate());
        }
        std::optional<double> metric;
        if (auto it = metrics.find(primary); it != metrics.end()) metric = it->second;
        KD_RETURN_IF_ERROR(stage.PostEpoch(metric));
        EpochReport report{.stage = stage.name(), .epoch = epoch + 1, .num_epochs = num_epochs,
                           .train_loss = train_loss, .metrics = metrics, .lr = stage.lr(),
                           .seconds = Seconds(epoch_start)};
        report.samples_per_second =
            static_cast<double>(stage.train_samples_per_epoch()) / train_seconds;
        KD_RETURN_IF_ERROR(Checkpoint(stage, s, epoch + 1, metric, evaluation.lower_is_better()));
        result.epochs.push_back(report);
        ++result.epochs_run;
        if (options_.on_epoch) options_.on_epoch(report);
        if (!metrics.empty()) result.final_metrics = metrics;
      }
      if (result.final_metrics.empty() && s + 1 == stages_.size()) {
        KD_ASSIGN_OR_RETURN(result.final_metrics, stage.Evaluate());
      }
    }
    for (const auto& [model, config] :
         {std::pair<Model*, const ModelConfig*>{student_.get(), &config_.student()},
          std::pair<Model*, const ModelConfig*>{teacher_.get(), &config_.teacher()}}) {
      if (model != nullptr && !config->dst_ckpt().empty()) {
        const std::string path = Resolve(options_.base_dir, config->dst_ckpt());
        KD_RETURN_IF_ERROR(CreateDirectories(fs::path(path).parent_path().string()));
        KD_RETURN_IF_ERROR(model->SaveState(path));
      }
    }
    result.seconds = Seconds(start);
    return result;
  }

 private:
  std::string LastPath() const { return (fs::path(ckpt_dir_) / "last.pt").string(); }

  static absl::Status CreateDirectories(const std::string& dir) {
    if (dir.empty()) return absl::OkStatus();
    std::error_code error;
    fs::create_directories(dir, error);
    if (error) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create the folder ", dir, ": ", error.message()));
    }
    return absl::OkStatus();
  }

  absl::Status Checkpoint(const Stage& stage, size_t stage_index, int64_t epochs_done,
                          std::optional<double> metric, bool lower_is_better) {
    c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
    dict.insert("format", std::string("libkd-checkpoint-1"));
    dict.insert("stage", static_cast<int64_t>(stage_index));
    dict.insert("stage_name", stage.name());
    // A finished stage resumes at the start of the next one.
    const bool stage_done = epochs_done >= stage.config().num_epochs();
    dict.insert("epoch", epochs_done);
    const bool improved =
        metric.has_value() &&
        (std::isnan(best_) || (lower_is_better ? *metric < best_ : *metric > best_));
    if (improved) best_ = *metric;
    dict.insert("best", best_);
    dict.insert("student", StateDict(*student_));
    if (teacher_ != nullptr) dict.insert("teacher", StateDict(*teacher_));
    stage.SaveTo(dict);
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      dict.insert("rng", generator.get_state());
    }
    if (stage_done && stage_index + 1 < stages_.size()) {
      dict.insert_or_assign("stage", static_cast<int64_t>(stage_index + 1));
      dict.insert_or_assign("epoch", int64_t{0});
      dict.insert("fresh_stage", true);
    }
    const c10::IValue value(dict);
    const CheckpointConfig& config = config_.checkpoint();
    if (!config.has_save_last() || config.save_last()) {
      KD_RETURN_IF_ERROR(WriteTorchFile(LastPath(), value));
    }
    if (improved && (!config.has_save_best() || config.save_best())) {
      KD_RETURN_IF_ERROR(WriteTorchFile((fs::path(ckpt_dir_) / "best.pt").string(), value));
    }
    if (stage_done) {  // the stage checkpoint: where the next stage starts
      KD_RETURN_IF_ERROR(
          WriteTorchFile((fs::path(ckpt_dir_) / absl::StrCat(stage.name(), ".pt")).string(), value));
    }
    if (config.every_n_epochs() > 0 && epochs_done % config.every_n_epochs() == 0) {
      KD_RETURN_IF_ERROR(WriteTorchFile(
          (fs::path(ckpt_dir_) / absl::StrCat(stage.name(), "_epoch", epochs_done, ".pt"))
              .string(),
          value));
    }
    return absl::OkStatus();
  }

  DistillConfig config_;
  BoxOptions options_;
  std::vector<StageConfig> stages_;
  int64_t seed_ = 0;
  c10::Device device_ = c10::Device(c10::kCPU);
  std::string run_dir_, ckpt_dir_;
  std::map<std::string, std::shared_ptr<Dataset>> datasets_;
  std::unique_ptr<Model> teacher_, student_;
  double best_ = NAN;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Box>> MakeBox(const DistillConfig& config,
                                             const BoxOptions& options) {
  auto box = std::make_unique<BoxImpl>(config, options);
  KD_RETURN_IF_ERROR(box->Init());
  return std::unique_ptr<Box>(std::move(box));
}

}  // namespace kd
