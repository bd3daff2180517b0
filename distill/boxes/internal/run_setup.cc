#include "distill/boxes/internal/run_setup.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "distill/boxes/internal/stage.h"
#include "distill/config/config_loader.h"
#include "distill/config/kwargs.h"

namespace kd {
namespace boxes_internal {

absl::StatusOr<std::string> RunDevice(const DistillConfig& config, const BoxOptions& options) {
  std::string device =
      options.device.value_or(config.run().device().empty() ? "cpu" : config.run().device());
  if (options.device_ids.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BoxOptions.device_ids names ", options.device_ids.size(),
        " devices: a libkd process runs on one (torch.nn.DataParallel's single-process "
        "replicas are not supported); run one process per device (//tools:distill "
        "--nproc_per_node or torchrun), each with its device"));
  }
  if (options.device_ids.size() == 1) {
    const std::string& id = options.device_ids.front();
    if (options.device.has_value() && *options.device != id) {
      return absl::InvalidArgumentError(absl::StrCat("BoxOptions.device_ids [\"", id,
                                                     "\"] disagrees with BoxOptions.device \"",
                                                     *options.device, "\": give one of them"));
    }
    device = id;
  }
  return device;
}

namespace fs = std::filesystem;

std::string RunDir(const DistillConfig& config, const BoxOptions& options) {
  std::string run_dir = options.run_dir;
  if (run_dir.empty()) run_dir = config.run().run_dir();
  if (run_dir.empty()) {
    run_dir = absl::StrCat("runs/", config.run().name().empty() ? "run" : config.run().name());
  }
  return ResolveAgainst(options.base_dir, run_dir);
}

std::string CheckpointDir(const DistillConfig& config, const std::string& run_dir) {
  return (fs::path(run_dir) /
          (config.checkpoint().dir().empty() ? "ckpt" : config.checkpoint().dir()))
      .string();
}

RunFolderOptions RunFolderOptionsFor(const DistillConfig& config, const BoxOptions& options,
                                     const std::string& checkpoint_dir) {
  RunFolderOptions folder{.resume = options.resume || !config.checkpoint().resume_from().empty(),
                          .overwrite = options.overwrite,
                          .checkpoint_dir = checkpoint_dir};
  for (const ModelConfig* model : {&config.teacher(), &config.student()}) {
    for (const std::string& file :
         {model->torchscript(), model->aoti_package(), model->src_ckpt()}) {
      if (!file.empty()) folder.inputs.push_back(ResolveAgainst(options.base_dir, file));
    }
  }
  // Stages' src_ckpt files: an earlier run's dst_ckpt kept in this folder is read, not replaced.
  for (const StageConfig* stage : StagesInRunOrder(config)) {
    for (const StageModelConfig* model : {&stage->teacher(), &stage->student()}) {
      if (!model->src_ckpt().empty()) {
        folder.inputs.push_back(ResolveAgainst(options.base_dir, model->src_ckpt()));
      }
    }
  }
  if (!config.checkpoint().resume_from().empty()) {
    folder.inputs.push_back(ResolveAgainst(options.base_dir, config.checkpoint().resume_from()));
  }
  // The data's folders: a dataset's string kwargs that name an existing folder (its root).
  for (const DatasetConfig& dataset : config.datasets()) {
    for (const Kwarg& kwarg : dataset.kwargs()) {
      std::error_code error;
      const std::string path = ResolveAgainst(options.base_dir, kwarg.str());
      if (kwarg.value_case() == Kwarg::kStr && !kwarg.str().empty() &&
          std::filesystem::is_directory(path, error)) {
        folder.data_folders.push_back(path);
      }
    }
  }
  // The stages' names as the box names them (stage<i> when unnamed): their checkpoints.
  const std::vector<const StageConfig*> stages = StagesInRunOrder(config);
  for (size_t i = 0; i < stages.size(); ++i) {
    folder.stage_names.push_back(stages[i]->name().empty() ? absl::StrCat("stage", i)
                                                           : stages[i]->name());
  }
  return folder;
}

absl::StatusOr<std::map<std::string, std::shared_ptr<Dataset>>> MakeDatasets(
    const DistillConfig& config) {
  std::map<std::string, std::shared_ptr<Dataset>> datasets;
  for (const DatasetConfig& dataset : config.datasets()) {
    KD_ASSIGN_OR_RETURN(Kwargs kwargs,
                        PluginKwargs(DatasetRegistry(), dataset.key(), dataset.kwargs(),
                                     absl::StrCat("dataset \"", dataset.key(), "\"")));
    const std::string field = absl::StrCat("dataset \"", dataset.id(), "\"");
    absl::StatusOr<std::shared_ptr<Dataset>> made = MakeDataset(dataset.key(), kwargs);
    if (made.ok() && dataset.subset().has_random_split()) {
      const RandomSplitConfig& split = dataset.subset().random_split();
      made = RandomSplitOf(*std::move(made), {split.lengths().begin(), split.lengths().end()},
                           split.seed(), split.part(),
                           split.lengths_rule() == RandomSplitConfig::SPLIT_DATASET
                               ? LengthsRule::kSplitDataset
                               : LengthsRule::kTorch);
    } else if (made.ok() && dataset.has_subset()) {
      made = SubsetOf(*std::move(made), dataset.subset().start(), dataset.subset().stop());
    }
    if (made.ok() && dataset.has_wrapper()) {
      absl::StatusOr<Kwargs> wrapper_kwargs = PluginKwargs(
          DatasetWrapperRegistry(), dataset.wrapper().key(), dataset.wrapper().kwargs(),
          absl::StrCat("dataset_wrapper \"", dataset.wrapper().key(), "\""));
      made = wrapper_kwargs.ok()
                 ? WrapDataset(dataset.wrapper().key(), *std::move(made), *wrapper_kwargs)
                 : wrapper_kwargs.status();
    }
    if (!made.ok()) return WithContext(field, made.status());
    datasets[dataset.id()] = *std::move(made);
  }
  return datasets;
}

absl::StatusOr<std::unique_ptr<Profiler>> MakeRunProfiler(const DistillConfig& config,
                                                          const BoxOptions& options,
                                                          const std::string& run_dir) {
  if (!config.has_profiler() && options.profile_dir.empty()) return nullptr;
  const ProfilerConfig& c = config.profiler();
  ProfilerOptions profiler;
  profiler.output_dir = !options.profile_dir.empty() ? options.profile_dir
                        : !c.output_dir().empty() ? ResolveAgainst(options.base_dir, c.output_dir())
                                                  : (fs::path(run_dir) / "profile").string();
  if (c.has_wait()) profiler.schedule.wait = c.wait();
  if (c.has_warmup()) profiler.schedule.warmup = c.warmup();
  if (c.has_active()) profiler.schedule.active = c.active();
  if (c.has_repeat()) profiler.schedule.repeat = c.repeat();
  profiler.schedule.skip_first = c.skip_first();
  if (c.has_record_shapes()) profiler.record_shapes = c.record_shapes();
  if (c.has_profile_memory()) profiler.profile_memory = c.profile_memory();
  profiler.with_stack = c.with_stack();
  profiler.tensorboard_dir = options.profile_tensorboard_dir;
  return CreateProfiler(profiler);  // its errors begin with "profiler: "
}

}  // namespace boxes_internal
}  // namespace kd
