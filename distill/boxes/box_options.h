// What a box reports and is run with: StepReport, EpochReport, BoxOptions, RunResult (the box
// itself: box.h). A header of its own so that a stage (internal/stage.h) reports without
// including the box.
#ifndef LIBKD_DISTILL_BOXES_BOX_OPTIONS_H_
#define LIBKD_DISTILL_BOXES_BOX_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

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
// What a stage's teacher cache (StageConfig.teacher_cache) did in an epoch.
struct TeacherCacheReport {
  bool on = false;
  std::string off_reason;    // why it is off (the config, or what makes it inexact)
  int64_t hits = 0;          // training rows served from the cache
  int64_t misses = 0;        // rows the teacher ran on (its checks of cached rows included)
  int64_t bytes_memory = 0;  // what the cache holds (all epochs so far)
  int64_t bytes_disk = 0;
  double teacher_seconds = 0;  // in the teacher's forward
  double saved_seconds = 0;    // hits times the teacher's mean time per row
  // TeacherCacheConfig.lookahead_rows: the most rows the teacher ran on at once for the
  // misses of the coming batches (0: the step's batch alone), and why not.
  int64_t lookahead_rows = 0;
  std::string lookahead_off_reason;
  // StageConfig.overlap_teacher: whether the teacher ran ahead on a thread of its own, and why
  // not.
  bool overlapped = false;
  std::string overlap_off_reason;
};

struct EpochReport {
  std::string stage;
  int64_t epoch = 0;  // from 1
  int64_t num_epochs = 0;
  double train_loss = 0;                  // mean over the epoch's batches
  std::map<std::string, double> metrics;  // validation: "loss", "accuracy", ... (may be empty)
  double lr = 0;
  double seconds = 0;
  double samples_per_second = 0;
  std::optional<TeacherCacheReport> teacher_cache;  // with a teacher
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
  // torchdistill's device_ids: the devices this process's models run on. libkd runs each
  // process on one device (a multi-process run: one per rank, as torchdistill's distributed
  // mode passes [local_rank]), so at most one entry: it sets the device, and must agree with
  // `device` when both are given. Several devices in one process (torch.nn.DataParallel) are
  // refused: run one process per device.
  std::vector<std::string> device_ids;
  // Continue from the run folder's last checkpoint (NotFound from MakeBox when it has none):
  // Run() goes on from it, and so does the step API, from start_epoch() (box.h).
  bool resume = false;
  // Replace the run the folder holds (its metrics, summary and checkpoints). Without resume or
  // overwrite, a folder that holds a run is refused (distill/boxes/run_folder.h).
  bool overwrite = false;
  // Profile the training steps into this folder (//tools:distill --profile_dir): with the
  // config's `profiler` settings, or silverspoon-kd's defaults when it has none. Default: only
  // a config's `profiler` profiles, into its output_dir or "<run_dir>/profile".
  std::string profile_dir;
  // Also place each trace where TensorBoard's profiler plugin finds it (//tools:distill:
  // "<run_dir>/tb/plugins/profile/<job>"), as torch.profiler.tensorboard_trace_handler does.
  // Empty: none.
  std::string profile_tensorboard_dir;
  // Multiplies every learning rate the config gives (the optimizer's "lr" and each parameter
  // group's), as torchdistill's lr_factor does (a script scales it with the number of
  // processes). Finite and > 0.
  double lr_factor = 1.0;
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

}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_BOX_OPTIONS_H_
