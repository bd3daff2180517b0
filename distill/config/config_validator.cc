#include "distill/config/config_validator.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file_util.h"
#include "base/nearest.h"
#include "base/registry.h"
#include "distill/config/config_loader.h"
#include "distill/config/feature_distillation.h"
#include "distill/config/internal/model_checks.h"
#include "distill/config/internal/output_files.h"
#include "distill/config/internal/stage_checks.h"
#include "distill/config/internal/stage_names.h"
#include "distill/config/internal/teacher_extras_checks.h"
#include "distill/config/plugin_kinds.h"
#include "distill/config/proc_fields.h"

namespace kd {
namespace {

using config_internal::IsPlainName;
using config_internal::kPlainNameRule;

// Worker threads of a loader: 100,000 of them took 8.5 GB and aborted.
constexpr int kMaxWorkers = 256;

using config_internal::RecordedIo;
using config_internal::StageContext;

// The walk over a config's sections; the generic checks come from config_internal::Checker, a
// stage's models, losses and optimizer from config_internal::StageChecker.
class Validator : private config_internal::StageChecker {
 public:
  Validator(const LoadedConfig& loaded, const ValidateOptions& options)
      : StageChecker(loaded, options.check_files),
        options_(options),
        has_teacher_(loaded.config.has_teacher() || options.teacher_handed_in) {}

  std::vector<ConfigProblem> Run() {
    const DistillConfig& config = loaded().config;
    const ConfigLocator root = loaded().Root();
    CheckFieldValues(config, root);  // numbers, strings, enums; kwargs' numbers in CheckPlugin
    if (config.has_run()) CheckRun(config.run(), root.Nested("run"));
    CheckDatasets(config, root);
    config_internal::CheckModels(config, root, options_.student_handed_in, *this);
    CheckStages(config, root);
    CheckStageCheckpoints(config, root);
    if (config.has_evaluation()) CheckEvaluation(config, root.Nested("evaluation"));
    if (config.has_test_data_loader()) {
      const ConfigLocator loc = root.Nested("test_data_loader");
      CheckLoader(config.test_data_loader(), loc);
      if (!config.has_evaluation()) {
        Add(loc.self(),
            "a test_data_loader needs the evaluation's metrics: add evaluation { "
            "metrics { key: \"accuracy\" } }");
      }
    }
    if (config.has_checkpoint()) CheckCheckpoint(config, root.Nested("checkpoint"));
    if (config.has_profiler()) CheckProfiler(config.profiler(), root.Nested("profiler"));
    config_internal::CheckOutputFiles(config, root, *this);
    return TakeProblems();
  }

 private:
  // torch.profiler.schedule's ranges, at each value's position.
  void CheckProfiler(const ProfilerConfig& profiler, const ConfigLocator& loc) {
    AtLeast(loc, "wait", profiler.wait(), int64_t{0});
    AtLeast(loc, "warmup", profiler.warmup(), int64_t{0});
    if (profiler.has_active()) AtLeast(loc, "active", profiler.active(), int64_t{1});
    AtLeast(loc, "repeat", profiler.repeat(), int64_t{0});
    AtLeast(loc, "skip_first", profiler.skip_first(), int64_t{0});
  }

  void CheckRun(const RunConfig& run, const ConfigLocator& loc) {
    // run.name names the folder runs/<name>: a plain name, never a path out of runs/ (UTF-8
    // is checked with the other strings).
    if (!run.name().empty() && !IsPlainName(run.name())) {
      Add(loc.Of("name"), absl::StrCat("run.name \"", absl::CHexEscape(run.name().substr(0, 80)),
                                       "\" must be a plain name ", kPlainNameRule,
                                       ": it names the folder runs/<name>; give a folder "
                                       "elsewhere as run_dir"));
    }
    CheckDevice(run.device(), loc, "device");
    AtLeast(loc, "log_every_n_steps", run.log_every_n_steps(), 0);
    AtLeast(loc, "distributed_timeout_s", run.distributed_timeout_s(), 0);
  }

  void CheckDatasets(const DistillConfig& config, const ConfigLocator& root) {
    for (const std::string& id : options_.handed_in_dataset_ids) {
      TextPosition handed = root.self();
      handed.field = absl::StrCat("the dataset \"", id, "\" handed to MakeBox");
      dataset_ids_.try_emplace(id, handed);
    }
    if (dataset_ids_.empty() && config.datasets().empty()) {
      Missing(root, "datasets", " (at least one dataset)");
    }
    for (int i = 0; i < config.datasets_size(); ++i) {
      const DatasetConfig& dataset = config.datasets(i);
      const ConfigLocator loc = root.Nested("datasets", i);
      if (dataset.id().empty()) {
        Missing(loc, "id");
      } else if (std::find(options_.handed_in_dataset_ids.begin(),
                           options_.handed_in_dataset_ids.end(),
                           dataset.id()) != options_.handed_in_dataset_ids.end()) {
        Add(loc.Of("id"), absl::StrCat("dataset \"", dataset.id(),
                                       "\" is both in the config and "
                                       "handed to MakeBox; drop one of them"));
      } else if (auto [it, inserted] = dataset_ids_.try_emplace(dataset.id(), loc.Of("id"));
                 !inserted) {
        Add(loc.Of("id"), absl::StrCat("duplicate dataset id \"", dataset.id(), "\" (first at ",
                                       it->second.ToString(), ")"));
      }
      CheckPlugin(kDatasetKind, dataset.key(), dataset.kwargs(), loc);
      if (dataset.has_wrapper()) {
        CheckPlugin(kDatasetWrapperKind, dataset.wrapper().key(), dataset.wrapper().kwargs(),
                    loc.Nested("wrapper"));
      }
      if (dataset.has_subset()) {
        const SubsetConfig& subset = dataset.subset();
        const ConfigLocator sloc = loc.Nested("subset");
        AtLeast(sloc, "start", subset.start(), int64_t{0});
        if (subset.stop() != 0 && subset.stop() <= subset.start()) {
          Add(sloc.Of("stop"), absl::StrCat("stop must be > start (", subset.start(), "), got ",
                                            subset.stop(), "; or 0 for the dataset's size"));
        }
        if (subset.has_random_split()) {
          const RandomSplitConfig& split = subset.random_split();
          if (subset.start() != 0 || subset.stop() != 0) {
            Add(sloc.Of("random_split"), "give start/stop or random_split, not both");
          }
          if (split.lengths().empty()) {
            Missing(sloc.Nested("random_split"), "lengths", "");
          } else if (split.part() < 0 || split.part() >= split.lengths_size()) {
            Add(sloc.Nested("random_split").Of("part"),
                absl::StrCat("part must be in [0, ", split.lengths_size(),
                             "), one per length; got ", split.part()));
          }
        }
      }
    }
  }

  void CheckStages(const DistillConfig& config, const ConfigLocator& root) {
    if (config.has_train() && !config.stages().empty()) {
      Add(root.Of("stages", 0), "give \"train\" or \"stages\", not both");
    } else if (!config.has_train() && config.stages().empty()) {
      Add(root.self(), "missing required field \"train\" or \"stages\" in DistillConfig");
    }
    if (config.has_train()) {
      CheckStage(config, config.train(), root.Nested("train"), /*first=*/true);
    }
    for (int i = 0; i < config.stages_size(); ++i) {
      CheckStage(config, config.stages(i), root.Nested("stages", i),
                 /*first=*/i == 0 && !config.has_train());
    }
    config_internal::CheckStageNames(config, root, *this);
  }

  // A stage model's src_ckpt must be readable, unless an earlier stage's dst_ckpt writes it.
  void CheckStageCheckpoints(const DistillConfig& config, const ConfigLocator& root) {
    std::vector<std::string> written;
    auto check = [&](const StageConfig& stage, const ConfigLocator& loc) {
      for (const char* role : {"teacher", "student"}) {
        const StageModelConfig& model =
            std::string(role) == "teacher" ? stage.teacher() : stage.student();
        const bool produced =
            std::any_of(written.begin(), written.end(), [&](const std::string& path) {
              return !model.src_ckpt().empty() && SameFile(path, ResolveUserPath(model.src_ckpt()));
            });
        if (!produced) CheckFile(model.src_ckpt(), loc.Nested(role), "src_ckpt");
      }
      for (const StageModelConfig* model : {&stage.teacher(), &stage.student()}) {
        if (!model->dst_ckpt().empty()) written.push_back(ResolveUserPath(model->dst_ckpt()));
      }
    };
    for (const auto& [stage, loc] : StagesInRunOrder(config, root)) check(*stage, loc);
  }

  void CheckStage(const DistillConfig& config, const StageConfig& stage, const ConfigLocator& loc,
                  bool first) {
    // A HOLISTIC feature_distillation section is checked as what it expands into (its hooks,
    // projectors and loss terms).
    StageConfig expanded;
    if (stage.has_feature_distillation()) {
      const FeatureDistillationConfig& fd = stage.feature_distillation();
      for (const std::string& error :
           FeatureDistillationErrors(fd, stage.criterion().terms_size() > 0)) {
        Add(loc.Of("feature_distillation"), error);
      }
      if (fd.has_projector_optimizer() && !fd.projector_optimizer().key().empty()) {
        CheckPlugin(kOptimizerKind, fd.projector_optimizer().key(),
                    fd.projector_optimizer().kwargs(),
                    loc.Nested("feature_distillation").Nested("projector_optimizer"));
      }
      if (absl::StatusOr<StageConfig> made = ExpandHolistic(stage, {}); made.ok()) {
        expanded = *std::move(made);
      } else {
        expanded = stage;
      }
    }
    CheckExpandedStage(config, stage.has_feature_distillation() ? expanded : stage, loc, first);
  }

  void CheckExpandedStage(const DistillConfig& config, const StageConfig& stage,
                          const ConfigLocator& loc, bool first) {
    RequiredPositive(loc, "num_epochs", stage.num_epochs());
    if (stage.has_train_data_loader()) {
      CheckLoader(stage.train_data_loader(), loc.Nested("train_data_loader"));
    } else if (first) {
      Missing(loc, "train_data_loader", " (required in the first stage)");
    }
    if (stage.has_val_data_loader()) {
      CheckLoader(stage.val_data_loader(), loc.Nested("val_data_loader"));
      WarnIfValidatingOnTestData(config, stage.val_data_loader(), loc.Nested("val_data_loader"));
    }

    const RecordedIo teacher_io(stage.teacher());
    const RecordedIo student_io(stage.student());
    StageContext context{has_teacher_, has_teacher_ ? &teacher_io : nullptr, &student_io};
    if (stage.has_teacher() && !has_teacher_) {
      Add(loc.Of("teacher"),
          "this stage configures a teacher, but the run has none (DistillConfig.teacher is unset)");
    }
    if (stage.has_teacher()) {
      CheckStageModel(stage.teacher(), loc.Nested("teacher"), IoRef::TEACHER, context);
    }
    CheckStageModel(stage.student(), loc.Nested("student"), IoRef::STUDENT, context);
    if (config.has_teacher() && config.teacher().optimize_for_inference()) {
      CheckFrozenTeacher(stage, loc,
                         "the teacher is optimized for inference (teacher.optimize_for_inference: "
                         "no parameters, its submodules inlined)",
                         /*hooks_below_output=*/false);
    } else if (config.has_teacher() && config.teacher().has_aoti_package()) {
      CheckFrozenTeacher(stage, loc,
                         "the teacher is an AOTInductor package (teacher.aoti_package: its "
                         "weights compiled in)",
                         /*hooks_below_output=*/true);
    }

    if (stage.has_optimizer()) {
      CheckOptimizer(stage.optimizer(), loc.Nested("optimizer"), context);
    } else if (first) {
      Missing(loc, "optimizer", " (required in the first stage)");
    }
    if (stage.has_scheduler()) {
      const ConfigLocator scheduler = loc.Nested("scheduler");
      CheckScheduler(stage.scheduler(), scheduler, /*nested=*/false);
      AtLeast(scheduler, "scheduling_step", stage.scheduler().scheduling_step(), 0);
    }
    if (stage.feature_distillation().mode() == FeatureDistillationConfig::BLOCKWISE) {
      // Its loss is the alignments' (FeatureDistillationErrors refuses terms).
    } else if (stage.has_criterion()) {
      CheckCriterion(stage.criterion(), loc.Nested("criterion"), context);
    } else {
      Missing(loc, "criterion");
    }
    CheckStageProcs(stage, loc);
    config_internal::CheckTeacherExtras(config, stage, loc, has_teacher_, *this);
  }

  void CheckLoader(const LoaderConfig& loader, const ConfigLocator& loc) {
    if (loader.dataset_id().empty()) {
      Missing(loc, "dataset_id");
    } else if (dataset_ids_.count(loader.dataset_id()) == 0) {
      std::vector<std::string> ids;
      for (const auto& [id, at] : dataset_ids_) ids.push_back(id);
      Add(loc.Of("dataset_id"), absl::StrCat("unknown dataset id \"", loader.dataset_id(), "\"; ",
                                             Suggest(loader.dataset_id(), ids)));
    }
    RequiredPositive(loc, "batch_size", loader.batch_size());
    AtLeast(loc, "num_workers", loader.num_workers(), 0);
    // Each worker is a thread with batches in flight: 100,000 of them took 8.5 GB and aborted.
    if (loader.num_workers() > kMaxWorkers) {
      Add(loc.Of("num_workers"),
          absl::StrCat("num_workers must be <= ", kMaxWorkers, ", got ", loader.num_workers(),
                       " (worker threads; a few per core is the most that helps)"));
    }
    if (loader.has_sampler()) {
      if (loader.shuffle()) Add(loc.Of("shuffle"), "give \"shuffle\" or \"sampler\", not both");
      CheckPlugin(kSamplerKind, loader.sampler().key(), loader.sampler().kwargs(),
                  loc.Nested("sampler"));
    }
  }

  void CheckEvaluation(const DistillConfig& config, const ConfigLocator& loc) {
    const EvaluationConfig& evaluation = config.evaluation();
    if (evaluation.metrics().empty()) Missing(loc, "metrics", " (at least one metric)");
    std::vector<std::string> names;
    for (int i = 0; i < evaluation.metrics_size(); ++i) {
      const MetricConfig& metric = evaluation.metrics(i);
      const ConfigLocator mloc = loc.Nested("metrics", i);
      CheckPlugin(kMetricKind, metric.key(), metric.kwargs(), mloc);
      const std::string name = metric.name().empty() ? metric.key() : metric.name();
      if (std::find(names.begin(), names.end(), name) != names.end()) {
        Add(mloc.Of(metric.name().empty() ? "key" : "name"),
            absl::StrCat("duplicate metric name \"", name, "\"; give the metrics distinct names"));
      }
      names.push_back(name);
    }
    if (!evaluation.primary_metric().empty() &&
        std::find(names.begin(), names.end(), evaluation.primary_metric()) == names.end()) {
      Add(loc.Of("primary_metric"),
          absl::StrCat("unknown metric \"", evaluation.primary_metric(), "\" in primary_metric; ",
                       Suggest(evaluation.primary_metric(), names)));
    }
    // The best checkpoint follows lower_is_better: a metric with a known direction against it
    // would keep the worst epoch's student.
    const int primary =
        evaluation.primary_metric().empty()
            ? 0
            : static_cast<int>(std::find(names.begin(), names.end(), evaluation.primary_metric()) -
                               names.begin());
    if (primary < evaluation.metrics_size()) {
      const std::string& key = evaluation.metrics(primary).key();
      const bool lower = key == "perplexity" || key == "bits_per_byte";
      const bool higher = key == "accuracy" || key == "token_accuracy";
      if ((lower && !evaluation.lower_is_better()) || (higher && evaluation.lower_is_better())) {
        Add(loc.Of("lower_is_better"),
            absl::StrCat("the primary metric \"", names[primary], "\" (", key, ") is ",
                         lower ? "lower" : "higher", "-is-better: set lower_is_better: ",
                         lower ? "true" : "false", " (else the worst epoch's student is kept)"));
      }
    }
    AtLeast(loc, "every_n_epochs", evaluation.every_n_epochs(), 0);
    if (evaluation.has_memory_leak_detection()) {
      const MemoryLeakDetectionConfig& leaks = evaluation.memory_leak_detection();
      const ConfigLocator lloc = loc.Nested("memory_leak_detection");
      const auto& diff = leaks.diff_between_batches();
      if (!diff.empty() && (diff.size() != 2 || diff[0] >= diff[1] || diff[0] < 1)) {
        Add(lloc.Of("diff_between_batches", 0),  // a repeated field: at its first value
            absl::StrCat("diff_between_batches must be two batches [first, second] with 1 <= "
                         "first < second, got [",
                         absl::StrJoin(diff, ", "), "]"));
      }
      if (leaks.has_snapshot_at_batch() && leaks.snapshot_path().empty()) {
        Add(lloc.Of("snapshot_at_batch"),
            "snapshot_path is required when snapshot_at_batch is set");
      }
      AtLeast(lloc, "log_every_n_batches", leaks.log_every_n_batches(), int64_t{0});
      AtLeast(lloc, "log_first_n_batches", leaks.log_first_n_batches(), int64_t{0});
      AtLeast(lloc, "max_diff_buckets", leaks.max_diff_buckets(), 0);
    }
    bool any_val_loader = config.train().has_val_data_loader();
    for (const StageConfig& stage : config.stages()) {
      any_val_loader = any_val_loader || stage.has_val_data_loader();
    }
    if (!any_val_loader && !config.has_test_data_loader())
      Add(loc.self(),
          "evaluation needs a val_data_loader (or a test_data_loader), and no stage has one");
  }

  void CheckCheckpoint(const DistillConfig& config, const ConfigLocator& loc) {
    const CheckpointConfig& checkpoint = config.checkpoint();
    AtLeast(loc, "every_n_epochs", checkpoint.every_n_epochs(), 0);
    if (checkpoint.has_save_best() && checkpoint.save_best() && !config.has_evaluation()) {
      Add(loc.Of("save_best"), "save_best needs evaluation (DistillConfig.evaluation is unset)");
    }
    CheckFile(checkpoint.resume_from(), loc, "resume_from");
  }

  const ValidateOptions& options_;
  const bool has_teacher_;  // the config's, or one handed to MakeBox
  std::map<std::string, TextPosition> dataset_ids_;
};

}  // namespace

std::vector<ConfigProblem> ValidateConfig(const LoadedConfig& loaded,
                                          const ValidateOptions& options) {
  return Validator(loaded, options).Run();
}

bool HasErrors(const std::vector<ConfigProblem>& problems) {
  return std::any_of(problems.begin(), problems.end(),
                     [](const ConfigProblem& p) { return p.is_error(); });
}

std::vector<std::string> UncheckedPluginKinds() {
  std::vector<std::string> kinds;
  for (absl::string_view kind : kConfigPluginKinds) {
    if (FindRegistry(kind) == nullptr) kinds.emplace_back(kind);
  }
  return kinds;
}

}  // namespace kd
