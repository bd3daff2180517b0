// The stage a box runs (StageRun, internal/stage.h) and the TrainingContext its process
// functions see: what torchdistill's box holds for the current stage. Its parts: stage.cc
// (building from the config, the training epoch, the forward), stage_setup.cc (requires_grad,
// loaders, parameter groups, hooks, auxiliary modules), stage_teacher.h (the teacher through
// its cache, look-ahead and overlap: one object the loop asks once a step), stage_eval.cc
// (validation and test), stage_state.cc (what a checkpoint keeps of it).
#ifndef LIBKD_DISTILL_BOXES_INTERNAL_STAGE_IMPL_H_
#define LIBKD_DISTILL_BOXES_INTERNAL_STAGE_IMPL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/optimizer.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/status_macros.h"
#include "distill/boxes/amp.h"
#include "distill/boxes/distributed/ddp.h"
#include "distill/boxes/internal/feature_stage.h"
#include "distill/boxes/internal/stage.h"
#include "distill/boxes/internal/stage_setup.h"
#include "distill/boxes/internal/stage_teacher.h"
#include "distill/boxes/metrics/metrics.h"
#include "distill/boxes/optim/optim.h"
#include "distill/data/data_loader.h"
#include "distill/losses/criterion.h"
#include "distill/procs/proc_func.h"
#include "distill/procs/training_context.h"
#include "hooks/forward_hook_manager.h"
#include "memdiag/leak_detection.h"

namespace kd {
namespace boxes_internal {

class Stage final : public StageRun, public TrainingContext {
 public:
  Stage(Model* teacher, Model* student, c10::Device device, RunConfig::Precision precision,
        c10::intrusive_ptr<c10d::ProcessGroup> group, double lr_factor)
      : lr_factor_(lr_factor),
        teacher_(teacher),
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
  absl::Status Build(const StageConfig& given, const StageConfig* previous,
                     const std::map<std::string, std::shared_ptr<Dataset>>& datasets,
                     const EvaluationConfig& evaluation, int64_t seed,
                     const std::string& run_dir) override;

  // DISTRIBUTED_DATA_PARALLEL in a multi-process run, as torchdistill's wrap_model: each
  // wrapped model that trains (the teacher only with requires_grad), with what trains beside
  // them (`own`: auxiliary modules, the losses' parameters, which Python's DDP would hold inside
  // the wrapped model), kept in sync by one Reducer.
  absl::Status WrapForDataParallel(const StageConfig& config, const std::vector<at::Tensor>& own);

  // TrainingContext.
  Model* model(ModelRole role) override {
    return role == ModelRole::kTeacher ? teacher_ : student_;
  }
  void ClearIo(ModelRole role) override {
    (role == ModelRole::kTeacher ? teacher_hooks_ : student_hooks_).ClearIoDict();
  }
  void KeepModel(std::unique_ptr<Model> model) override { kept_.push_back(std::move(model)); }
  void SetEvaluatedStudent(Model* student) override { evaluated_student_ = student; }
  bool distributed() const override { return group_.defined(); }
  void SetSamplerEpoch(int64_t) override {}
  void Barrier() override {
    if (distributed()) group_->barrier()->wait();
  }
  int64_t IncrementStageGradCount() override { return ++grad_count_; }
  int64_t stage_grad_count() const override { return grad_count_; }
  int64_t grad_accum_step() const override { return grad_accum_step_; }
  bool teacher_in_eval_mode() const override { return teacher_in_eval_mode_; }
  std::optional<double> max_grad_norm() const override { return max_grad_norm_; }
  void Backward(const at::Tensor& loss) override {
    // A BLOCKWISE stage with backward_per_block ran each block's backward in its Forward.
    if (backward_done_) {
      backward_done_ = false;
      return;
    }
    RunBackward(loss);
  }
  void ClipGradNorm(double max_norm) override {
    if (scaler_ != nullptr) scaler_->Unscale(*optimizer_);
    if (blockwise_ != nullptr) {
      blockwise_->ClipGradNorm(max_norm);
    } else {
      torch::nn::utils::clip_grad_norm_(clipped_, max_norm);
    }
  }
  void OptimizerStep() override;
  void ZeroGrad() override { optimizer_->zero_grad(/*set_to_none=*/true); }
  bool has_scheduler() const override { return scheduler_ != nullptr; }
  int64_t scheduling_step() const override { return scheduling_step_; }
  void SchedulerStep(const SchedulerStepArgs& args) override {
    if (scheduler_ != nullptr) scheduler_->Step(args);
  }
  void AuxiliaryPostEpoch(ModelRole) override {}
  const IoDict* io_dict(ModelRole role) const override {
    if (role == ModelRole::kTeacher && teacher_ == nullptr) return nullptr;
    return role == ModelRole::kTeacher ? &teacher_io_ : &student_io_;
  }
  Criterion* stage_criterion() override { return criterion_.get(); }
  torch::optim::Optimizer* stage_optimizer() override { return optimizer_.get(); }
  LrScheduler* lr_scheduler() override { return scheduler_.get(); }
  DataLoader* train_data_loader() override { return train_loader_.get(); }
  DataLoader* val_data_loader() override { return val_loader_.get(); }

  // The step API (StageRun).
  absl::Status PreEpoch(int64_t epoch) override;
  absl::Status PreForward(Batch& batch) override;
  absl::StatusOr<CriterionResult> Forward(Batch& batch) override;
  absl::Status PostForward(const at::Tensor& loss, const Kwargs& kwargs = {}) override {
    return (*post_forward_)(*this, loss, std::nullopt, kwargs);
  }
  absl::StatusOr<c10::IValue> TeacherOutput(Batch& batch) override;
  std::vector<std::string> hooked_paths(ModelRole role) const override {
    return (role == ModelRole::kTeacher ? teacher_hooks_ : student_hooks_).HookedKeys();
  }
  DataLoader& train_loader() override { return *train_loader_; }
  const IoDict& teacher_io() const override { return teacher_io_; }
  const IoDict& student_io() const override { return student_io_; }
  torch::optim::Optimizer& optimizer() override { return *optimizer_; }
  LrScheduler* scheduler() override { return scheduler_.get(); }
  Criterion& criterion() override { return *criterion_; }
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> auxiliary_modules()
      const override {
    std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> modules;
    for (const AuxModule& aux : aux_) modules.emplace_back(aux.name, aux.module.ptr());
    return modules;
  }

  // One epoch of training (epoch counts from 0) over the step API; the mean loss.
  absl::StatusOr<double> TrainEpoch(int64_t epoch, const BoxOptions& options, int log_every,
                                    Profiler* profiler) override;

  // The validation loss and metrics of the student (empty without a validation loader).
  absl::StatusOr<std::map<std::string, double>> Evaluate() override {
    if (val_loader_ == nullptr) return std::map<std::string, double>();
    return EvaluateOn(*val_loader_);
  }

  absl::StatusOr<std::map<std::string, double>> Test(
      const LoaderConfig& loader, const std::map<std::string, std::shared_ptr<Dataset>>& datasets,
      int64_t seed) override;

  absl::StatusOr<std::map<std::string, double>> EvaluateOn(DataLoader& loader);

  int64_t world_size() const { return distributed() ? group_->getSize() : 1; }
  int64_t rank() const { return distributed() ? group_->getRank() : 0; }

  // The post-epoch process function; then auxiliary modules with a ckpt file written (rank 0).
  absl::Status PostEpoch(std::optional<double> metric) override {
    KD_RETURN_IF_ERROR((*post_epoch_)(*this, metric));
    if (rank() != 0) return absl::OkStatus();
    for (const AuxModule& aux : aux_) {
      KD_RETURN_IF_ERROR(
          WithContext(absl::StrCat(aux.name, ".ckpt"), SaveAuxiliaryCheckpoint(aux)));
    }
    return absl::OkStatus();
  }

  // What a checkpoint keeps of this stage.
  void SaveTo(c10::impl::GenericDict& dict) const override;

  absl::Status LoadFrom(const c10::impl::GenericDict& dict) override;

  const std::string& name() const override { return name_; }
  const StageConfig& config() const override { return config_; }
  double lr() const override { return LearningRates(*optimizer_).at(0); }
  std::optional<TeacherCacheReport> TakeTeacherCacheReport() override {
    return stage_teacher_.TakeReport();
  }
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

  // The teacher's forward through its hooks and auxiliary modules (teacher_io_): its output.
  absl::StatusOr<c10::IValue> RunTeacher(const Batch& batch);

  // Forward without the messages: the models, their I/O dicts (teacher_io_, student_io_), the
  // criterion.
  absl::StatusOr<CriterionResult> ForwardModels(const Batch& batch);
  // The optimizer over what trains, max_grad_norm, grad_accum_step, the teacher's mode, the DDP
  // wrapping and the scheduler (stage_optimizer.cc); `config` is `given` expanded.
  absl::Status BuildOptimizer(const StageConfig& config, const StageConfig& given,
                              const StageConfig* previous);
  // `given` with its HOLISTIC feature_distillation expanded (the projectors auto_projector
  // leaves out inferred on the training set's first samples); `given` otherwise.
  absl::StatusOr<StageConfig> ExpandFeatureDistillation(
      const StageConfig& given, const StageConfig* previous,
      const std::map<std::string, std::shared_ptr<Dataset>>& datasets, int64_t seed);
  void RunBackward(const at::Tensor& loss) {
    RECORD_USER_SCOPE("backward");
    (scaler_ != nullptr ? scaler_->Scale(loss) : loss).backward();
  }
  // The teacher's forward set up for this stage (after the loaders and the process functions).
  absl::Status SetUpTeacher(const StageConfig& config, const std::string& run_dir);

  double lr_factor_;
  // Chains of `sequential` sections (KeepModel): declared before the hook managers, which
  // remove their hooks from them.
  std::vector<std::unique_ptr<Model>> kept_;
  Model* teacher_;
  Model* student_;
  Model* evaluated_student_ = student_;
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
  std::vector<at::Tensor> clipped_;  // what ClipGradNorm clips: params_ less unclipped projectors
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<LrScheduler> scheduler_;
  int64_t scheduling_step_ = 0;
  std::optional<double> max_grad_norm_;
  int64_t grad_accum_step_ = 1;
  bool teacher_in_eval_mode_ = true;  // StageConfig.teacher_mode
  int64_t grad_count_ = 0;
  // Optional only because they have no default constructor: Build sets them.
  std::optional<ProcFunc<PreEpochProc>> pre_epoch_;
  std::optional<ProcFunc<PreForwardProc>> pre_forward_;
  std::optional<ProcFunc<PostForwardProc>> post_forward_;
  std::optional<ProcFunc<PostEpochProc>> post_epoch_;
  std::optional<ProcFunc<ForwardProc>> student_forward_;
  std::optional<ProcFunc<ForwardProc>> eval_forward_;  // the student's in evaluation
  std::vector<std::pair<std::string, std::unique_ptr<Metric>>> metrics_;
  std::vector<AuxModule> aux_;
  LeakDetection leaks_;                           // memdiag's, when the evaluation asks for it
  std::optional<at::ScalarType> autocast_dtype_;  // run.precision BF16 / FP16
  std::unique_ptr<GradScaler> scaler_;            // FP16 only
  IoDict teacher_io_, student_io_;                // the last Forward's
  std::unique_ptr<Blockwise> blockwise_;          // a BLOCKWISE feature_distillation's blocks
  bool backward_per_block_ = false;               // FeatureDistillationConfig's
  bool backward_done_ = false;                    // by the last Forward's blocks
  // The teacher through its cache, look-ahead and overlap; after what its thread uses (the
  // teacher's hooks), so that the thread is joined first.
  StageTeacher stage_teacher_;
  int64_t epoch_ = 0, step_ = 0;  // of the step API: for messages
};

}  // namespace boxes_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_INTERNAL_STAGE_IMPL_H_
