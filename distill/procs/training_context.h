// What process functions may do to the box that runs them: the interface the default pre/post
// epoch and forward processes need from a distillation (or training) box.
//
//   absl::Status MyPreEpoch(kd::TrainingContext& box, int64_t epoch, const kd::Kwargs&) {
//     box.ClearIo(kd::ModelRole::kStudent);
//     box.model(kd::ModelRole::kStudent)->SetTraining(true);
//     return absl::OkStatus();
//   }
//
// A process function also reaches what torchdistill's get as the box: the I/O dicts of the last
// forward, the criterion, optimizer, scheduler and loaders (io_dict(), stage_optimizer(), ...).
//
// Boxes (a later part of distill/) implement it; tests implement it with fakes.
#ifndef LIBKD_DISTILL_PROCS_TRAINING_CONTEXT_H_
#define LIBKD_DISTILL_PROCS_TRAINING_CONTEXT_H_

#include <cstdint>
#include <optional>

#include <ATen/core/Tensor.h>

#include "hooks/model.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace kd {

class Criterion;    // distill/losses/criterion.h
class DataLoader;   // distill/data/data_loader.h
class IoDict;       // hooks/io_dict.h
class LrScheduler;  // distill/boxes/optim/optim.h

// The two models of a box. A box without a teacher has only the student.
enum class ModelRole { kTeacher, kStudent };

// What a scheduler step is given; each scheduler uses what it needs, as torchdistill's
// defaults pass it: ReduceLROnPlateau the metric, CosineAnnealingWarmRestarts the epoch.
struct SchedulerStepArgs {
  // The primary validation metric, if one was computed.
  std::optional<double> metric;
  // The epoch to step to: for step-wise scheduling, the scheduling periods completed in this
  // stage; unset for epoch-wise scheduling (the scheduler's own count + 1).
  std::optional<int64_t> epoch;
};

class TrainingContext {
 public:
  virtual ~TrainingContext() = default;

  // The model in `role`, or nullptr (a teacher in a box without one).
  virtual Model* model(ModelRole role) = 0;

  // Empties what the forward hooks of the model in `role` recorded.
  virtual void ClearIo(ModelRole role) = 0;

  // Whether training runs in several processes (then samplers reshuffle per epoch and
  // epochs end with a barrier).
  virtual bool distributed() const = 0;
  // Sets the distributed sampler's epoch, so each epoch shuffles differently.
  virtual void SetSamplerEpoch(int64_t epoch) = 0;
  // Waits for every process.
  virtual void Barrier() = 0;

  // Adds one to the count of batches trained in this stage and returns the new count.
  virtual int64_t IncrementStageGradCount() = 0;
  // The count of batches trained in this stage so far (checkpoints keep it): what a process
  // function seeds its per-batch draws with, so a resumed run draws what an uninterrupted one did.
  virtual int64_t stage_grad_count() const { return 0; }
  // Batches whose gradients add up before an optimizer step (>= 1).
  virtual int64_t grad_accum_step() const = 0;
  // The gradient-norm clip, if any.
  virtual std::optional<double> max_grad_norm() const = 0;

  // Back-propagates `loss`.
  virtual void Backward(const at::Tensor& loss) = 0;
  // Clips the total L2 norm of the gradients of the optimizer's parameters to `max_norm`.
  virtual void ClipGradNorm(double max_norm) = 0;
  // One step of the optimizer.
  virtual void OptimizerStep() = 0;
  // Sets the gradients of the optimizer's parameters to zero.
  virtual void ZeroGrad() = 0;

  // Whether a learning-rate scheduler is set.
  virtual bool has_scheduler() const = 0;
  // 0: the scheduler steps after each epoch; N > 0: after every N batches.
  virtual int64_t scheduling_step() const = 0;
  virtual void SchedulerStep(const SchedulerStepArgs& args) = 0;

  // Runs the end-of-epoch work of the auxiliary modules of the model in `role`, if any.
  virtual void AuxiliaryPostEpoch(ModelRole role) = 0;
  // Whether the default pre-epoch process puts the teacher in eval mode (StageConfig.
  // teacher_mode TEACHER_EVAL, the default); false leaves its mode as it is (TEACHER_AS_IS,
  // torchdistill's boxes).
  virtual bool teacher_in_eval_mode() const { return true; }

  // The rest of the box's view, as torchdistill's process functions get the whole box (`self`)
  // and a caller's loop gets it from kd::Box: the stage's I/O dicts of the last forward (the
  // teacher's, the student's), its criterion, optimizer, scheduler and loaders (torchdistill's
  // teacher_io_dict, student_io_dict, criterion, optimizer, lr_scheduler, train_data_loader,
  // val_data_loader). Null where there is none: no teacher, no scheduler, no validation loader,
  // or a context that is not a box's (a test's fake).
  virtual const IoDict* io_dict(ModelRole) const { return nullptr; }
  virtual Criterion* stage_criterion() { return nullptr; }
  virtual torch::optim::Optimizer* stage_optimizer() { return nullptr; }
  virtual LrScheduler* lr_scheduler() { return nullptr; }
  virtual DataLoader* train_data_loader() { return nullptr; }
  virtual DataLoader* val_data_loader() { return nullptr; }
};

}  // namespace kd

#endif  // LIBKD_DISTILL_PROCS_TRAINING_CONTEXT_H_
