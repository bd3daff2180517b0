#include "distill/config/config_summary.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "distill/config/config_loader.h"

namespace kd {
namespace {

// "TorchScript x.pt", "TorchScript x.pt optimized for inference", "native model \"fashion_cnn\"".
std::string DescribeModel(const ModelConfig& model) {
  if (model.has_native()) return absl::StrCat("native model \"", model.native().key(), "\"");
  if (model.has_aoti_package()) return absl::StrCat("AOTInductor package ", model.aoti_package());
  return absl::StrCat("TorchScript ", model.torchscript(),
                      model.optimize_for_inference() ? " optimized for inference" : "");
}

std::string DescribeLoader(const LoaderConfig& loader, const DistillConfig& config) {
  std::string key;
  for (const DatasetConfig& dataset : config.datasets()) {
    if (dataset.id() == loader.dataset_id()) key = dataset.key();
  }
  return absl::StrCat("\"", loader.dataset_id(), "\" (", key, ", batch ", loader.batch_size(),
                      loader.shuffle() ? ", shuffled" : "", ")");
}

std::string DescribeCriterion(const CriterionConfig& criterion) {
  std::vector<std::string> terms;
  for (const LossTermConfig& term : criterion.terms()) {
    const std::string name = term.name().empty() ? term.key() : term.name();
    terms.push_back(absl::StrCat(term.has_weight() ? term.weight() : 1.0, " * ", name,
                                 name == term.key() ? "" : absl::StrCat(" (", term.key(), ")")));
  }
  return absl::StrJoin(terms, " + ");
}

std::string DescribeStage(const StageConfig& stage, int index, const DistillConfig& config) {
  std::string out = absl::StrCat(
      "Stage \"", stage.name().empty() ? absl::StrCat("stage", index) : stage.name(),
      "\": ", stage.num_epochs(), stage.num_epochs() == 1 ? " epoch" : " epochs", " on ",
      stage.has_train_data_loader() ? DescribeLoader(stage.train_data_loader(), config)
                                    : std::string("the previous stage's data"),
      ", loss ", DescribeCriterion(stage.criterion()));
  if (stage.has_optimizer()) {
    absl::StrAppend(&out, ", optimizer ", stage.optimizer().key());
    if (stage.optimizer().grad_accum_step() > 1) {
      absl::StrAppend(&out, " every ", stage.optimizer().grad_accum_step(), " batches");
    }
  }
  if (stage.has_scheduler()) {
    const int step = stage.scheduler().scheduling_step();
    absl::StrAppend(&out, ", scheduler ", stage.scheduler().key(),
                    step <= 0   ? " per epoch"
                    : step == 1 ? " per batch"
                                : absl::StrCat(" every ", step, " batches"));
  }
  return absl::StrCat(out, ".");
}

}  // namespace

std::string SummarizeConfig(const DistillConfig& config) {
  const std::vector<const StageConfig*> stages = StagesInRunOrder(config);
  int epochs = 0;
  for (const StageConfig* stage : stages) epochs += stage->num_epochs();

  std::string out = config.has_teacher()
                        ? absl::StrCat("Distills the teacher (", DescribeModel(config.teacher()),
                                       ") into the student (", DescribeModel(config.student()), ")")
                        : absl::StrCat("Trains the student (", DescribeModel(config.student()),
                                       ") without a teacher");
  absl::StrAppend(&out, " in ", stages.size(), stages.size() == 1 ? " stage" : " stages", " of ",
                  epochs, epochs == 1 ? " epoch" : " epochs", " in all.");
  for (size_t i = 0; i < stages.size(); ++i) {
    absl::StrAppend(&out, " ", DescribeStage(*stages[i], static_cast<int>(i), config));
  }
  if (config.has_evaluation()) {
    std::vector<std::string> metrics;
    for (const MetricConfig& metric : config.evaluation().metrics()) {
      metrics.push_back(metric.name().empty() ? metric.key() : metric.name());
    }
    absl::StrAppend(&out, " Evaluates ", absl::StrJoin(metrics, ", "), " on the validation data");
    const int every = std::max(1, config.evaluation().every_n_epochs());
    absl::StrAppend(
        &out, every == 1 ? " after every epoch." : absl::StrCat(" every ", every, " epochs."));
  }
  const RunConfig& run = config.run();
  const std::string name = run.name().empty() ? "run" : run.name();
  absl::StrAppend(&out, " Run \"", name, "\" writes to ",
                  run.run_dir().empty() ? absl::StrCat("runs/", name) : run.run_dir(), " on ",
                  run.device().empty() ? "cpu" : run.device(), ", seed ", run.seed(), ".");
  return out;
}

}  // namespace kd
