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

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "distill/config/distill_config.pb.h"

namespace kd {

// One logged training step (every run.log_every_n_steps batches).
struct StepReport {
  std::string stage;
  int64_t epoch = 0;  // from 1
  int64_t step = 0;   // batch in the epoch, from 1
  int64_t steps_per_epoch = 0;
  double loss = 0;
  std::map<std::string, double> terms;  // each term's unweighted value
  double lr = 0;
  double samples_per_second = 0;
  double seconds_per_step = 0;  // over the steps since the last report
};

// One finished epoch.
struct EpochReport {
  std::string stage;
  int64_t epoch = 0;  // from 1
  int64_t num_epochs = 0;
  double train_loss = 0;                  // mean over the epoch's batches
  std::map<std::string, double> metrics;  // validation: "loss", "accuracy", ... (may be empty)
  double lr = 0;
  double seconds = 0;
  double samples_per_second = 0;
};

struct BoxOptions {
  // Where checkpoints and metrics.jsonl go. Default: run.run_dir, else "runs/<run.name>".
  std::string run_dir;
  // Relative paths in the config (models, checkpoints) are taken from here. Default: the
  // working directory.
  std::string base_dir;
  // Override run.seed / run.device.
  std::optional<int64_t> seed;
  std::optional<std::string> device;
  // Continue from the run folder's last checkpoint (NotFound when it has none).
  bool resume = false;
  // Replace the run the folder holds (its metrics, summary and checkpoints). Without resume or
  // overwrite, a folder that holds a run is refused (distill/boxes/run_folder.h).
  bool overwrite = false;
  // Profile the training steps into this folder (//tools:distill --profile_dir): with the
  // config's `profiler` settings, or silverspoon-kd's defaults when it has none. Default: only
  // a config's `profiler` profiles, into its output_dir or "<run_dir>/profile".
  std::string profile_dir;
  // Called for logged steps and finished epochs (progress display).
  std::function<void(const StepReport&)> on_step;
  std::function<void(const EpochReport&)> on_epoch;
};

struct RunResult {
  std::vector<EpochReport> epochs;
  // The last stage's validation metrics after its last epoch ("loss", "accuracy", "top5"...).
  std::map<std::string, double> final_metrics;
  // With a test_data_loader: the test metrics of the student the run ends with.
  std::map<std::string, double> test_metrics;
  // The checkpoint whose student the run ends with, tests and saves to dst_ckpt: the best by
  // validation ("best.pt" under the checkpoint dir), or empty for the final student (no
  // validation).
  std::string tested_checkpoint;
  double seconds = 0;
  // Epochs run by this call (fewer than the config's after a resume).
  int64_t epochs_run = 0;
};

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
