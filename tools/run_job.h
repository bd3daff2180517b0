// One config run by //tools:distill in its run folder: the box, progress lines and
// metrics.jsonl (rank 0), TensorBoard events in <run_dir>/tb/, summary.json.
#ifndef LIBKD_TOOLS_RUN_JOB_H_
#define LIBKD_TOOLS_RUN_JOB_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "distill/config/distill_config.pb.h"
#include "tools/run_log.pb.h"

namespace kd {

// How to run it (//tools:distill's flags).
struct JobOptions {
  std::string run_dir;  // else the config's run.run_dir, else runs/<job>
  bool resume = false;
  bool overwrite = false;
  std::optional<int64_t> seed;  // overrides run.seed
  std::string device;           // overrides run.device
  std::string profile_dir;      // profile into <profile_dir>/<job>; empty: the config's profiler
  bool tensorboard = true;
  int tensorboard_histograms_every = 0;  // 0: no histograms
};

// A part of one of the program's default jobs: its run's name and its config's file name in the
// job's configs folder (tools/configs, or --job_configs).
struct JobPart {
  const char* name;
  const char* config;
};

// Runs `config` (whose text is `config_text`) as `job`; writes metrics.jsonl, the TensorBoard
// events and summary.json in the run folder, which it creates if missing.
absl::StatusOr<RunSummary> RunJob(const DistillConfig& config, const std::string& job,
                                  const std::string& config_text, const JobOptions& options);

}  // namespace kd

#endif  // LIBKD_TOOLS_RUN_JOB_H_
