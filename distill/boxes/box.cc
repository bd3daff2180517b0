#include "distill/boxes/box.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/device.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "base/torch_file.h"
#include "base/torch_status.h"
#include "distill/boxes/checkpoint.h"
#include "distill/boxes/distributed/ddp.h"
#include "distill/boxes/distributed/rank_monitor.h"
#include "distill/boxes/internal/box_impl.h"
#include "distill/boxes/internal/run_setup.h"
#include "distill/boxes/internal/stage.h"
#include "distill/boxes/model_paths.h"
#include "distill/boxes/run_folder.h"
#include "distill/config/config_loader.h"
#include "distill/config/config_validator.h"
#include "distill/data/dataset.h"
#include "distill/models/model_registry.h"
#include "hooks/sequential_model.h"
#include "hooks/torchscript_model.h"

namespace kd {
namespace boxes_internal {

namespace fs = std::filesystem;

absl::Status BoxImpl::Init() {
  stages_.clear();
  for (const StageConfig* stage : StagesInRunOrder(config_)) stages_.push_back(*stage);
  if (stages_.empty()) return absl::InvalidArgumentError("no stage: set train or stages");
  for (size_t i = 0; i < stages_.size(); ++i) {
    if (stages_[i].name().empty()) stages_[i].set_name(absl::StrCat("stage", i));
    // Auxiliary modules' checkpoint files resolved here, where the base dir is known.
    for (StageModelConfig* model : {stages_[i].mutable_teacher(), stages_[i].mutable_student()}) {
      for (AuxiliaryModuleConfig& aux : *model->mutable_auxiliary_modules()) {
        if (!aux.ckpt().empty()) aux.set_ckpt(ResolveAgainst(options_.base_dir, aux.ckpt()));
      }
    }
  }
  seed_ = options_.seed.value_or(config_.run().seed());
  KD_ASSIGN_OR_RETURN(const std::string device, boxes_internal::RunDevice(config_, options_));
  // Checked here as the tools check it: a CUDA device on a machine without one is one line.
  absl::StatusOr<c10::Device> parsed = ParseDevice(device);
  if (!parsed.ok()) {
    return WithContext("run.device", parsed.status());
  }
  device_ = *parsed;
  // A multi-process run (torchrun's environment, WORLD_SIZE > 1) joins its process group.
  KD_ASSIGN_OR_RETURN(DistributedEnv env, DistributedEnvFromEnvironment());
  rank_ = env.rank;
  if (rank_ != 0) {  // progress and logs are rank 0's
    options_.on_step = nullptr;
    options_.on_epoch = nullptr;
  }
  if (env.world_size > 1) {
    // torchrun's convention: each rank on the GPU of its LOCAL_RANK unless one is named.
    if (device_.is_cuda() && !device_.has_index()) {
      device_ = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
    }
    const int timeout_s =
        config_.run().distributed_timeout_s() > 0 ? config_.run().distributed_timeout_s() : 300;
    KD_ASSIGN_OR_RETURN(group_, InitProcessGroup(env, device_, std::chrono::seconds(timeout_s)));
    KD_ASSIGN_OR_RETURN(monitor_, RankMonitor::Start(group_));
  }
  run_dir_ = boxes_internal::RunDir(config_, options_);
  ckpt_dir_ = boxes_internal::CheckpointDir(config_, run_dir_);
  if (rank_ == 0) {  // the rank that writes holds the folder for the run
    KD_ASSIGN_OR_RETURN(folder_, RunFolder::Claim(run_dir_, boxes_internal::RunFolderOptionsFor(
                                                                config_, options_, ckpt_dir_)));
  }
  at::manual_seed(seed_);
  KD_ASSIGN_OR_RETURN(datasets_, boxes_internal::MakeDatasets(config_));
  for (auto& [id, dataset] : inputs_.datasets) {
    if (dataset == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("dataset \"", id, "\" handed to MakeBox is null"));
    }
    if (!datasets_.emplace(id, std::move(dataset)).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dataset \"", id, "\" is both in the config and handed to MakeBox; drop one of them"));
    }
  }
  inputs_.datasets.clear();
  if (inputs_.teacher != nullptr) {
    KD_ASSIGN_OR_RETURN(teacher_, AdoptModel(std::move(inputs_.teacher), config_.teacher(),
                                             options_.base_dir, "teacher"));
  } else if (config_.has_teacher()) {
    KD_ASSIGN_OR_RETURN(teacher_, LoadModel(config_.teacher(), options_.base_dir, "teacher"));
  }
  if (teacher_ != nullptr) {
    teacher_->To(device_);
    if (config_.teacher().optimize_for_inference()) {
      KD_ASSIGN_OR_RETURN(teacher_, OptimizeForInference(*teacher_, "teacher"));
    }
  }
  if (inputs_.student != nullptr) {
    KD_ASSIGN_OR_RETURN(student_, AdoptModel(std::move(inputs_.student), config_.student(),
                                             options_.base_dir, "student"));
  } else {
    KD_ASSIGN_OR_RETURN(student_, LoadModel(config_.student(), options_.base_dir, "student"));
  }
  student_->To(device_);
  // Every stage is built once here, so that a mistake in a later stage shows before the first
  // one trains. Building may draw random numbers (a loss's own layers): the RNG state is put
  // back, so the check leaves no trace in the run.
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  at::Tensor rng;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    rng = generator.get_state();
  }
  for (size_t s = 0; s < stages_.size(); ++s) KD_RETURN_IF_ERROR(BuildStage(s).status());
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(rng);
  }
  return ReadResume();
}

absl::StatusOr<RunResult> BoxImpl::Run() {
  if (stepped_) {
    return absl::FailedPreconditionError(
        "Run after the step API was used on this box: make a new box to run it end to end");
  }
  // A c10::ValueError is bad input data (a dataset's file that does not decode, naming its
  // sample): InvalidArgument, which a tool reports with exit 2; any other error is libtorch's.
  absl::StatusOr<absl::StatusOr<RunResult>> ran =
      CallTorchWith([&] { return RunStages(); }, [](const std::exception& e) {
        const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
        const std::string text = torch_error != nullptr
                                     ? std::string(StatusFromTorchError(*torch_error).message())
                                     : std::string(e.what());
        if (dynamic_cast<const c10::ValueError*>(&e) != nullptr) {
          return absl::InvalidArgumentError(absl::StrCat("the run stopped on bad input: ", text));
        }
        return absl::InternalError(absl::StrCat("the run stopped on libtorch's error: ", text));
      });
  absl::StatusOr<RunResult> result = ran.ok() ? *std::move(ran) : ran.status();
  if (!result.ok() && monitor_ != nullptr) {
    // A lost or failed rank explains this one's error (a process function wraps a failed
    // collective in its own status); otherwise the error is this rank's, and the others are
    // told.
    absl::Status peers = monitor_->Explain(result.status().message());
    if (peers.code() == absl::StatusCode::kUnavailable) return peers;
    monitor_->ReportFailure(result.status().message());
  }
  return result;
}

absl::StatusOr<RunResult> BoxImpl::RunStages() {
  const Clock::time_point start = Clock::now();
  RunResult result;
  const size_t first_stage = resume_.has_value() ? resume_->stage : 0;
  const int log_every =
      config_.run().log_every_n_steps() > 0 ? config_.run().log_every_n_steps() : 50;
  const EvaluationConfig& evaluation = config_.evaluation();
  const std::string primary = PrimaryMetric();
  std::unique_ptr<Profiler> profiler;  // rank 0's
  if (rank_ == 0) {
    KD_ASSIGN_OR_RETURN(profiler, boxes_internal::MakeRunProfiler(config_, options_, run_dir_));
  }
  std::unique_ptr<StageRun> last_stage;
  for (size_t s = first_stage; s < stages_.size(); ++s) {
    // The previous stage's hooks go before the next stage's come (torchdistill's clean_modules).
    last_stage.reset();
    KD_ASSIGN_OR_RETURN(std::unique_ptr<StageRun> run, BuildStage(s));
    StageRun& stage = *run;
    int64_t epoch = 0;
    if (resume_.has_value() && s == first_stage) {
      KD_RETURN_IF_ERROR(EnterResumedStage(stage));
      epoch = resume_->epoch;
    } else {
      KD_RETURN_IF_ERROR(StartStage(stage));
    }
    const int64_t num_epochs = stages_[s].num_epochs();
    for (; epoch < num_epochs; ++epoch) {
      const Clock::time_point epoch_start = Clock::now();
      KD_ASSIGN_OR_RETURN(double train_loss,
                          stage.TrainEpoch(epoch, options_, log_every, profiler.get()));
      const double train_seconds = Seconds(epoch_start);
      const int every = std::max(1, evaluation.every_n_epochs());
      std::map<std::string, double> metrics;
      if ((epoch + 1) % every == 0 || epoch + 1 == num_epochs) {
        KD_ASSIGN_OR_RETURN(metrics, stage.Evaluate());
      }
      std::optional<double> metric;
      if (auto it = metrics.find(primary); it != metrics.end()) metric = it->second;
      KD_RETURN_IF_ERROR(stage.PostEpoch(metric));
      EpochReport report{.stage = stage.name(),
                         .epoch = epoch + 1,
                         .num_epochs = num_epochs,
                         .train_loss = train_loss,
                         .metrics = metrics,
                         .lr = stage.lr(),
                         .seconds = Seconds(epoch_start)};
      report.samples_per_second =
          static_cast<double>(stage.train_samples_per_epoch()) / train_seconds;
      report.teacher_cache = stage.TakeTeacherCacheReport();
      // The stage's models go to their dst_ckpt before the checkpoint that ends the stage.
      if (epoch + 1 == num_epochs) KD_RETURN_IF_ERROR(EndStage(stage));
      KD_RETURN_IF_ERROR(Checkpoint(stage, s, epoch + 1, metric, evaluation.lower_is_better()));
      result.epochs.push_back(report);
      ++result.epochs_run;
      if (options_.on_epoch) options_.on_epoch(report);
      if (!metrics.empty()) result.final_metrics = metrics;
    }
    if (result.final_metrics.empty() && s + 1 == stages_.size()) {
      KD_ASSIGN_OR_RETURN(result.final_metrics, stage.Evaluate());
    }
    last_stage = std::move(run);
  }
  if (profiler != nullptr) KD_RETURN_IF_ERROR(profiler->Stop());  // an open window is saved
  // The run's student from here on is the one validation chose.
  KD_RETURN_IF_ERROR(ChooseStudent(result));
  for (const auto& [model, config] :
       {std::pair<Model*, const ModelConfig*>{student_.get(), &config_.student()},
        std::pair<Model*, const ModelConfig*>{teacher_.get(), &config_.teacher()}}) {
    if (model != nullptr && !config->dst_ckpt().empty()) {
      const std::string path = ResolveAgainst(options_.base_dir, config->dst_ckpt());
      KD_RETURN_IF_ERROR(CreateDirectories(fs::path(path).parent_path().string()));
      KD_RETURN_IF_ERROR(model->SaveState(path));
    }
  }
  if (config_.has_test_data_loader()) {
    KD_RETURN_IF_ERROR(Test(std::move(last_stage), result));
  }
  result.seconds = Seconds(start);
  return result;
}

std::string BoxImpl::PrimaryMetric() const {
  const EvaluationConfig& evaluation = config_.evaluation();
  if (!evaluation.primary_metric().empty()) return evaluation.primary_metric();
  if (evaluation.metrics().empty()) return "loss";
  return evaluation.metrics(0).name().empty() ? evaluation.metrics(0).key()
                                              : evaluation.metrics(0).name();
}

absl::StatusOr<std::unique_ptr<StageRun>> BoxImpl::BuildStage(size_t s) {
  std::unique_ptr<Model> chains[2];  // the teacher's, the student's
  Model* models[2] = {teacher_.get(), student_.get()};
  for (int m = 0; m < 2; ++m) {
    const StageModelConfig& config = m == 0 ? stages_[s].teacher() : stages_[s].student();
    if (models[m] == nullptr || config.sequential().empty()) continue;
    absl::StatusOr<std::unique_ptr<Model>> chain = MakeSequentialModel(
        *models[m],
        std::vector<std::string>(config.sequential().begin(), config.sequential().end()));
    if (!chain.ok()) {
      return WithContext(absl::StrCat("stage \"", stages_[s].name(), "\" ",
                                  m == 0 ? "teacher" : "student", ".sequential"),
                     chain.status());
    }
    chains[m] = *std::move(chain);
    models[m] = chains[m].get();
  }
  std::unique_ptr<StageRun> stage = boxes_internal::NewStage(
      models[0], models[1], device_, config_.run().precision(), group_, options_.lr_factor);
  if (chains[1] != nullptr) stage->SetEvaluatedStudent(student_.get());
  for (std::unique_ptr<Model>& chain : chains) {
    if (chain != nullptr) stage->KeepModel(std::move(chain));
  }
  const absl::Status built = stage->Build(stages_[s], s > 0 ? &stages_[s - 1] : nullptr, datasets_,
                                          config_.evaluation(), seed_, run_dir_);
  if (!built.ok()) return WithContext(absl::StrCat("stage \"", stages_[s].name(), "\""), built);
  return stage;
}

absl::Status BoxImpl::ChooseStudent(RunResult& result) {
  const std::string best = (fs::path(ckpt_dir_) / "best.pt").string();
  if (!std::isnan(best_) && rank_ == 0 && fs::exists(best)) {
    KD_ASSIGN_OR_RETURN(c10::impl::GenericDict saved, ReadCheckpoint(best));
    KD_RETURN_IF_ERROR(LoadStateDict(*student_, saved.at("student"), best));
    result.tested_checkpoint = best;
  }
  if (group_) KD_RETURN_IF_ERROR(BroadcastFromRankZero(*student_, *group_));
  return absl::OkStatus();
}

absl::Status BoxImpl::Test(std::unique_ptr<StageRun> last_stage, RunResult& result) {
  if (last_stage == nullptr) {
    KD_ASSIGN_OR_RETURN(last_stage, BuildStage(stages_.size() - 1));
  }
  KD_ASSIGN_OR_RETURN(result.test_metrics,
                      last_stage->Test(config_.test_data_loader(), datasets_, seed_));
  return absl::OkStatus();
}

}  // namespace boxes_internal

absl::StatusOr<std::unique_ptr<Box>> MakeBox(const DistillConfig& config,
                                             const BoxOptions& options) {
  return MakeBox(config, BoxInputs{}, options);
}

absl::StatusOr<std::unique_ptr<Box>> MakeBox(const DistillConfig& config, BoxInputs inputs,
                                             const BoxOptions& options) {
  if (!std::isfinite(options.lr_factor) || options.lr_factor <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("BoxOptions.lr_factor must be finite and > 0, got ", options.lr_factor));
  }
  // Every config is checked as the loader's are, whether it was loaded, built in code or parsed
  // without the loader: the same errors, named by field path where there are no lines.
  ValidateOptions validate{.teacher_handed_in = inputs.teacher != nullptr,
                           .student_handed_in = inputs.student != nullptr};
  for (const auto& [id, dataset] : inputs.datasets) validate.handed_in_dataset_ids.push_back(id);
  LoadedConfig loaded;
  loaded.config = config;
  std::vector<std::string> errors;
  for (const ConfigProblem& problem : ValidateConfig(loaded, validate)) {
    if (problem.is_error()) errors.push_back(problem.ToString());
  }
  if (!errors.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the config handed to MakeBox is not valid (", errors.size(),
                     errors.size() == 1 ? " problem" : " problems", "):\n  ",
                     absl::StrJoin(errors, "\n  ")));
  }
  auto box = std::make_unique<boxes_internal::BoxImpl>(config, options, std::move(inputs));
  KD_RETURN_IF_ERROR(box->Init());
  return std::unique_ptr<Box>(std::move(box));
}

}  // namespace kd
