#include "tools/run_job.h"

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>

#include <torch/headeronly/version.h>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "distill/boxes/box.h"
#include "distill/boxes/distributed/ddp.h"
#include "tools/run_report.h"

namespace kd {
namespace {

constexpr char kLibkdVersion[] = "0.1.0";

}  // namespace

absl::StatusOr<RunSummary> RunJob(const DistillConfig& config, const std::string& job,
                                  const std::string& config_text, const JobOptions& job_options) {
  std::string run_dir = job_options.run_dir;
  if (run_dir.empty()) run_dir = config.run().run_dir();
  if (run_dir.empty()) run_dir = "runs/" + job;
  run_dir = ResolveUserPath(run_dir);
  // The run folder is made and claimed by the box (RunFolder::Claim): anything in the way,
  // a folder in /dev, /proc or /sys or inside a dataset's folder, is bad input, checked before
  // anything is made.
  BoxOptions options;
  options.run_dir = run_dir;
  options.base_dir = ResolveUserPath(".");
  options.resume = job_options.resume;
  options.seed = job_options.seed;
  if (!job_options.device.empty()) options.device = job_options.device;
  if (!job_options.profile_dir.empty()) options.profile_dir = job_options.profile_dir + "/" + job;
  if (job_options.tensorboard) {
    options.profile_tensorboard_dir =
        (std::filesystem::path(run_dir) / "tb" / "plugins" / "profile" / job).string();
  }
  // In a multi-process run only rank 0 reports and writes metrics.jsonl and summary.json.
  options.overwrite = job_options.overwrite;
  KD_ASSIGN_OR_RETURN(DistributedEnv env, DistributedEnvFromEnvironment());
  // metrics.jsonl is opened once the box holds the run folder (an earlier run's is removed by
  // --overwrite, and a folder in use is refused before anything is written to it).
  std::optional<Reporter> reporter;
  std::unique_ptr<Box> box;
  const int histograms = job_options.tensorboard_histograms_every;
  if (env.rank == 0) {
    options.on_step = [&](const StepReport& r) { reporter->Step(r); };
    options.on_epoch = [&](const EpochReport& r) {
      reporter->Epoch(r);
      if (histograms > 0 && r.epoch % histograms == 0) {
        reporter->Histograms(box->student(), r.stage, r.epoch);
      }
    };
  }
  KD_ASSIGN_OR_RETURN(box, MakeBox(config, options));
  if (env.rank == 0) {
    reporter.emplace(run_dir, job);
    if (job_options.tensorboard) {
      // The box holds the folder now; a replaced run's events go with it.
      const std::filesystem::path tb = std::filesystem::path(run_dir) / "tb";
      std::error_code error;
      if (job_options.overwrite) std::filesystem::remove_all(tb, error);
      KD_RETURN_IF_ERROR(reporter->EnableTensorboard(tb.string(), config_text));
      if (histograms > 0) reporter->WatchGradients(box->student());
    }
  }
  KD_ASSIGN_OR_RETURN(RunResult result, box->Run());
  RunSummary summary;
  summary.set_name(job);
  summary.set_box(box->kind());
  for (const auto& [name, value] : result.final_metrics) {
    (*summary.mutable_final_metrics())[name] = value;
  }
  for (const auto& [name, value] : result.test_metrics) {
    (*summary.mutable_test_metrics())[name] = value;
  }
  summary.set_tested_checkpoint(result.tested_checkpoint);
  summary.set_seconds(result.seconds);
  summary.set_epochs_run(result.epochs_run);
  summary.set_seed(options.seed.value_or(config.run().seed()));
  summary.set_device(
      options.device.value_or(config.run().device().empty() ? "cpu" : config.run().device()));
  summary.set_config_digest(Digest(config_text));
  summary.set_libkd_version(kLibkdVersion);
  summary.set_torch_version(TORCH_VERSION);
  if (env.rank != 0) return summary;
  KD_RETURN_IF_ERROR(WriteFileAtomically((std::filesystem::path(run_dir) / "summary.json").string(),
                                         Json(summary) + "\n"));
  return summary;
}

}  // namespace kd
