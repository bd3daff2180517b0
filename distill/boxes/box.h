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

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "distill/boxes/box_options.h"
#include "distill/config/distill_config.pb.h"

namespace kd {

class Box {
 public:
  virtual ~Box() = default;
  // "TrainingBox", "DistillationBox", "MultiStagesTrainingBox" or "MultiStagesDistillationBox".
  virtual std::string kind() const = 0;
  // Runs every stage (after a resume: what is left). Errors name the stage and what failed.
  virtual absl::StatusOr<RunResult> Run() = 0;
};

// The box `config` describes; models, datasets and stage plugins are built and checked here
// (errors name the config field), the run starts with Run().
absl::StatusOr<std::unique_ptr<Box>> MakeBox(const DistillConfig& config,
                                             const BoxOptions& options = {});

}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_BOX_H_
