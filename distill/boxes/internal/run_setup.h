// What a box makes of its config before the first stage: the run folder's place and claim
// options, the datasets, the profiler. Each reads only the config and BoxOptions.
#ifndef LIBKD_DISTILL_BOXES_INTERNAL_RUN_SETUP_H_
#define LIBKD_DISTILL_BOXES_INTERNAL_RUN_SETUP_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "distill/boxes/box_options.h"
#include "distill/boxes/run_folder.h"
#include "distill/config/distill_config.pb.h"
#include "distill/data/dataset.h"
#include "profiler/profiler.h"

namespace kd {
namespace boxes_internal {

// The device the run's process uses: BoxOptions.device_ids' one entry, BoxOptions.device or
// run.device ("cpu" when none is given). InvalidArgument for device_ids that disagree with
// `device` or name more than one device.
absl::StatusOr<std::string> RunDevice(const DistillConfig& config, const BoxOptions& options);

// The run's folder: BoxOptions.run_dir, else run.run_dir, else "runs/<run.name or run>",
// relative ones against BoxOptions.base_dir.
std::string RunDir(const DistillConfig& config, const BoxOptions& options);

// The checkpoint folder inside `run_dir`: checkpoint.dir, else "ckpt".
std::string CheckpointDir(const DistillConfig& config, const std::string& run_dir);

// How the writing rank claims `run_dir` (run_folder.h): resume or overwrite as asked, and the
// run's inputs (model files, the checkpoint resumed from) that its outputs must not replace.
RunFolderOptions RunFolderOptionsFor(const DistillConfig& config, const BoxOptions& options,
                                     const std::string& checkpoint_dir);

// Every dataset of the config by id, subsets taken; errors name the dataset.
absl::StatusOr<std::map<std::string, std::shared_ptr<Dataset>>> MakeDatasets(
    const DistillConfig& config);

// The run's profiler from the config's `profiler` and BoxOptions.profile_dir (which wins);
// null when neither is set. Traces go to profile_dir, else profiler.output_dir, else
// <run_dir>/profile.
absl::StatusOr<std::unique_ptr<Profiler>> MakeRunProfiler(const DistillConfig& config,
                                                          const BoxOptions& options,
                                                          const std::string& run_dir);

}  // namespace boxes_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_INTERNAL_RUN_SETUP_H_
