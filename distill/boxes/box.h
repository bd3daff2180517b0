// Boxes: a DistillConfig run end to end — models, data, hooks, loss, optimizer,
// scheduler and process functions built from the config, epochs with
// evaluation, stages in order, atomic checkpoints and resume. torchdistill's
// four boxes, chosen from the config by MakeBox:
//
//   TrainingBox                 no teacher, one stage (`train`)
//   DistillationBox             a teacher, one stage
//   MultiStagesTrainingBox      no teacher, `stages`
//   MultiStagesDistillationBox  a teacher, `stages`
//
//   KD_ASSIGN_OR_RETURN(kd::DistillConfig config, kd::LoadDistillConfig("kd.pbtxt"));
//   KD_ASSIGN_OR_RETURN(std::unique_ptr<kd::Box> box,
//                       kd::MakeBox(config, {.run_dir = "runs/kd", .resume = true}));
//   KD_ASSIGN_OR_RETURN(kd::RunResult result, box->Run());
//
// A box is also a library for a loop of the caller's own: the step API below (torchdistill's
// pre_epoch_process, forward_process, ...), of which Run is one loop, and MakeBox over the
// caller's own models and datasets (BoxInputs, torchdistill's get_distillation_box).
//
// Each stage runs torchdistill's loop through the process functions
// (distill/procs): pre-epoch; per batch pre-forward, the teacher's forward
// (eval mode under no-grad unless it trains), the student's, the criterion on
// their outputs and I/O dicts, post-forward (backward, clipping, optimizer and
// step-wise scheduler steps); evaluation; post-epoch. A stage implements
// kd::TrainingContext, which is what the process functions see.
//
// Mixed precision (run.precision): BF16 / FP16 run forwards and losses under libtorch's autocast
// (distill/boxes/amp.h), FP16 with dynamic loss scaling. Optimizer parameter groups follow
// torchdistill's module-wise params: only the listed modules train, each at its own kwargs.
// With a test_data_loader, the best student by validation is tested once at the end.
//
// Checkpoints: one torch.save file (models' tensors, the optimizer's state, the
// scheduler's, the losses' own tensors, the CPU RNG state, stage and epoch),
// written atomically under the run folder's checkpoint dir: "last.pt" after
// every epoch, "best.pt" on a new best primary metric, "<stage>.pt" at the end
// of each stage (a later stage resumes from it afresh),
// "<stage>_epoch<N>.pt" every checkpoint.every_n_epochs. Resume
// (BoxOptions.resume, or checkpoint.resume_from) continues from "last.pt" to
// the result an uninterrupted run gives: batches are a function of (seed,
// epoch), and the RNG state is restored. A NaN or infinite loss stops the run
// naming the stage, epoch, step and terms, leaving the last good checkpoint as
// it was.
#ifndef LIBKD_DISTILL_BOXES_BOX_H_
#define LIBKD_DISTILL_BOXES_BOX_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "base/kwargs.h"
#include "distill/boxes/box_options.h"
#include "distill/config/distill_config.pb.h"
#include "distill/data/batch.h"
#include "distill/data/data_loader.h"
#include "distill/data/dataset.h"
#include "hooks/io_dict.h"
#include "hooks/model.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn
namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace kd {

class Criterion;    // distill/losses/criterion.h
class LrScheduler;  // distill/boxes/optim/optim.h

class Box {
 public:
  virtual ~Box() = default;
  // "TrainingBox", "DistillationBox", "MultiStagesTrainingBox" or "MultiStagesDistillationBox".
  virtual std::string kind() const = 0;
  // Runs every stage (after a resume: what is left). Errors name the stage and what failed.
  // Run is a loop over the stage's step API below (with checkpoints, logs and the profiler); a
  // box driven by hand cannot Run afterwards (FailedPrecondition).
  virtual absl::StatusOr<RunResult> Run() = 0;

  // torchdistill's step API, for a training loop of the caller's own (its names:
  // pre_epoch_process, pre_forward_process, forward_process, post_forward_process,
  // post_epoch_process, advance_to_next_stage), ported line by line from torchdistill's
  // examples/torchvision/image_classification.py:
  //
  //   for (int64_t epoch = box->start_epoch(); epoch < box->num_epochs(); ++epoch) {
  //     KD_RETURN_IF_ERROR(box->PreEpoch(epoch));
  //     KD_ASSIGN_OR_RETURN(kd::DataLoader* loader, box->TrainLoader());
  //     for (kd::BatchStream batches(*loader); !batches.done();) {
  //       kd::Batch batch = batches.Next();
  //       KD_RETURN_IF_ERROR(box->PreForward(batch));
  //       KD_ASSIGN_OR_RETURN(at::Tensor loss, box->Forward(batch));
  //       KD_RETURN_IF_ERROR(box->PostForward(loss));  // backward, optimizer, scheduler
  //     }
  //     KD_ASSIGN_OR_RETURN(auto metrics, box->Evaluate());
  //     KD_RETURN_IF_ERROR(box->PostEpoch(metrics));  // the next stage after a stage's last
  //   }
  //
  // As torchdistill's multi-stage box, epochs count over the whole run: num_epochs() is the sum
  // of the stages' epochs, and PostEpoch after a stage's last epoch advances to the next stage
  // (saving the stage's dst_ckpt), so the loop above runs every stage. AdvanceToNextStage
  // still moves on early; the new stage then covers the run's next epochs. PostEpoch also
  // writes the run's checkpoints as Run does (last.pt, best.pt on a better primary metric,
  // every_n_epochs), so a hand loop stopped anywhere resumes: MakeBox with
  // BoxOptions.resume, and the loop from start_epoch().
  //
  // What the step API does not do that Run() does: the teacher cache (StageConfig.teacher_cache)
  // serves Forward as it serves Run, but its look-ahead and the teacher a batch ahead
  // (overlap_teacher) need the batches ahead of the step, which a caller's loop fetches itself:
  // they run in Run() only (box_benchmark --step_api_epochs compares the two).
  //
  // Calls out of this order are FailedPrecondition naming the call that was due; the stage
  // is built by the first call. The same config and seed give the weights Run() gives, bit for
  // bit, when the loop takes its batches from TrainLoader after PreEpoch.
  //
  // The current stage's pre-epoch process. `epoch` is the run's (from 0, as torchdistill's
  // scripts count it) and must lie in the current stage's epochs, [stage_start_epoch(),
  // stage_start_epoch() + stage_num_epochs()): FailedPrecondition naming them otherwise (a loop
  // that counts epochs per stage). The stage's own epoch (epoch - stage_start_epoch()) sets
  // the training loader's order, as Run's does.
  virtual absl::Status PreEpoch(int64_t epoch) = 0;
  // `batch` to the run's device, then the pre-forward process.
  virtual absl::Status PreForward(Batch& batch) = 0;
  // The teacher's and the student's forwards through their hooks and the criterion over their
  // I/O dicts: the total loss. Errors name the stage, epoch, step and dataset.
  virtual absl::StatusOr<at::Tensor> Forward(Batch& batch) = 0;
  // The post-forward process (backward, clipping, optimizer and step-wise scheduler steps) on
  // `loss`: the last Forward's, or one the caller's loop computed itself (from TeacherOutput,
  // the I/O dicts, its own student forward: torchdistill's scripts may), as long as an epoch is
  // open. `kwargs` reach the process function over the config's (torchdistill's **kwargs).
  virtual absl::Status PostForward(const at::Tensor& loss, const Kwargs& kwargs = {}) = 0;
  // The student's validation loss and metrics (empty without a validation loader).
  virtual absl::StatusOr<std::map<std::string, double>> Evaluate() = 0;
  // The post-epoch process, given the epoch's metrics (its primary metric steps a
  // ReduceLROnPlateau scheduler and chooses best.pt); the run's checkpoints written; after the
  // current stage's last epoch, the next stage, as AdvanceToNextStage (torchdistill's
  // multi-stage post_epoch_process).
  virtual absl::Status PostEpoch(const std::map<std::string, double>& metrics) = 0;
  // The next stage, built on the same models (the current one's hooks removed first);
  // OutOfRange after the last stage.
  virtual absl::Status AdvanceToNextStage() = 0;
  // torchdistill's clean_modules: the current stage's hooks removed and I/O dicts dropped, every
  // parameter of both models trainable again; the next call builds the stage anew (freezing
  // what its config freezes). Only between epochs.
  virtual absl::Status CleanModules() = 0;
  // torchdistill's save_stage_ckpt: the current stage's models written to their stage's
  // dst_ckpt (AdvanceToNextStage does it too; Run does it at each stage's end). Not between a
  // Forward and its PostForward.
  virtual absl::Status SaveStageCheckpoint() = 0;
  // The current stage's training loader (torchdistill's train_data_loader), set to the epoch of
  // the last PreEpoch: a kd::BatchStream over it gives the batches Run takes.
  virtual absl::StatusOr<DataLoader*> TrainLoader() = 0;
  // torchdistill's get_teacher_output: the teacher's output on `batch` (moved to the run's
  // device first), its forward run through its hooks and auxiliary modules (under no-grad
  // unless it trains); its I/O dict is TeacherIoDict's until the next Forward. Not between a
  // Forward and its PostForward; FailedPrecondition without a teacher.
  virtual absl::StatusOr<c10::IValue> TeacherOutput(Batch& batch) = 0;
  // The module paths the current stage hooks (torchdistill's target_teacher_pairs,
  // target_student_pairs; the handles stay the stage's: its end removes them).
  virtual absl::StatusOr<std::vector<std::string>> TeacherHookedPaths() = 0;
  virtual absl::StatusOr<std::vector<std::string>> StudentHookedPaths() = 0;
  // The I/O dicts of the last Forward (torchdistill's teacher_io_dict, student_io_dict; the
  // teacher's also of a TeacherOutput); FailedPrecondition before one.
  virtual absl::StatusOr<const IoDict*> TeacherIoDict() = 0;
  virtual absl::StatusOr<const IoDict*> StudentIoDict() = 0;
  // The current stage's optimizer, scheduler (null: none) and criterion, for a loop that steps
  // or reads them itself (torchdistill's box.optimizer, box.lr_scheduler, box.criterion).
  virtual absl::StatusOr<torch::optim::Optimizer*> Optimizer() = 0;
  virtual absl::StatusOr<LrScheduler*> Scheduler() = 0;
  virtual absl::StatusOr<Criterion*> StageCriterion() = 0;
  // The current stage's auxiliary modules by name, in order: its config's ("student.connector",
  // "teacher.<name>") and the projectors its feature_distillation made and trains
  // ("student.<alignment>/input_projector", ".../output_projector"). To read, save or fuse what
  // the stage trained: kd::FuseProjectorsIntoModule (distill/boxes/projector_fusion.h) folds a
  // projector into the student module it feeds.
  virtual absl::StatusOr<std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>>
  AuxiliaryModules() = 0;
  // The models the stages train (torchdistill's student_model, teacher_model; null: none): the
  // whole models, also in a stage that trains a `sequential` chain of one.
  virtual Model& student() = 0;
  virtual Model* teacher() = 0;
  // The dataset of id `id` (the config's or one handed in; torchdistill's dataset_dict[id]);
  // null: none of that id.
  virtual std::shared_ptr<Dataset> dataset(const std::string& id) const = 0;
  // Where the run's checkpoints go (last.pt, best.pt, ...): the config's checkpoint.dir, or
  // "<run_dir>/ckpt".
  virtual std::string checkpoint_dir() const = 0;
  // The run's epochs, every stage's (torchdistill's box.num_epochs).
  virtual int64_t num_epochs() const = 0;
  // The run's epoch a loop starts at (torchdistill's args.start_epoch): 0, or for a resumed box
  // (BoxOptions.resume, checkpoint.resume_from) the first epoch its checkpoint had not finished;
  // the step API then continues as Run would, in the checkpoint's stage with its optimizer,
  // scheduler, losses and RNG state.
  virtual int64_t start_epoch() const = 0;
  // The current stage: its index (from 0), its epochs and the run's epoch it starts at.
  virtual size_t stage_index() const = 0;
  virtual int64_t stage_num_epochs() const = 0;
  virtual int64_t stage_start_epoch() const = 0;
  virtual size_t num_stages() const = 0;
};

// The box `config` describes; models, datasets and stage plugins are built and checked here
// (errors name the config field), the run starts with Run().
absl::StatusOr<std::unique_ptr<Box>> MakeBox(const DistillConfig& config,
                                             const BoxOptions& options = {});

// What a caller hands a box instead of the config's sections, as torchdistill's scripts hand
// get_distillation_box(teacher_model, student_model, dataset_dict, ...) their own objects:
// models as kd::Model handles (kd::MakeNativeModel over a torch::nn::Module, or a TorchScript
// module), datasets by the ids the config's loaders name (any kd::Dataset, registered or not).
// The config still gives the stages, hooks, losses, optimizer, scheduler and process
// functions; its `teacher`/`student` may still give src_ckpt, dst_ckpt and
// optimize_for_inference for a handed model, but not a model of their own.
struct BoxInputs {
  std::unique_ptr<Model> teacher;  // null: the config's (or none)
  std::unique_ptr<Model> student;  // null: the config's
  std::map<std::string, std::shared_ptr<Dataset>> datasets;
};

// The box `config` describes, over the objects in `inputs` where they are given.
absl::StatusOr<std::unique_ptr<Box>> MakeBox(const DistillConfig& config, BoxInputs inputs,
                                             const BoxOptions& options = {});

}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_BOX_H_
