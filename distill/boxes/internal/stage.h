// Internal to distill/boxes: one stage of a box — what torchdistill's box holds for its current
// stage (hooks, criterion, loaders, optimizer, scheduler, process functions, metrics) and the
// epoch loop over it. The stage is the kd::TrainingContext the process functions see; box.cc
// runs the stages in order and owns the models, datasets and checkpoints.
#ifndef LIBKD_DISTILL_BOXES_INTERNAL_STAGE_H_
#define LIBKD_DISTILL_BOXES_INTERNAL_STAGE_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Dict.h>
#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "distill/boxes/box_options.h"
#include "distill/boxes/optim/optim.h"
#include "distill/config/distill_config.pb.h"
#include "distill/data/batch.h"
#include "distill/data/data_loader.h"
#include "distill/data/dataset.h"
#include "distill/losses/criterion.h"
#include "distill/procs/training_context.h"
#include "hooks/io_dict.h"
#include "hooks/model.h"
#include "profiler/profiler.h"

namespace c10d {
class ProcessGroup;
}  // namespace c10d
namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace kd {
namespace boxes_internal {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

class StageRun {
 public:
  virtual ~StageRun() = default;

  // Builds everything of `config`; `previous` (or null) supplies the loaders, optimizer and
  // scheduler a later stage leaves unset. Errors name the field.
  // `run_dir` (may be empty: the system's temporary folder) takes the teacher cache's spill file.
  virtual absl::Status Build(const StageConfig& config, const StageConfig* previous,
                             const std::map<std::string, std::shared_ptr<Dataset>>& datasets,
                             const EvaluationConfig& evaluation, int64_t seed,
                             const std::string& run_dir) = 0;
  // torchdistill's step API for this stage; Box checks the order of the calls.
  // The pre-epoch process function; the training loader's epoch (its order).
  virtual absl::Status PreEpoch(int64_t epoch) = 0;
  // `batch` to the stage's device, then the pre-forward process function.
  virtual absl::Status PreForward(Batch& batch) = 0;
  // The teacher's and the student's forwards through their hooks and the criterion over their
  // I/O dicts (kept for teacher_io / student_io until the next Forward). Errors name the stage,
  // epoch, step and dataset; a shape error of libtorch's is InvalidArgument, a non-finite loss
  // FailedPrecondition naming the terms.
  virtual absl::StatusOr<CriterionResult> Forward(Batch& batch) = 0;
  // torchdistill's get_teacher_output: `batch` to the stage's device, the teacher's forward
  // (under no-grad unless it trains) through its hooks and auxiliary modules; its I/O dict
  // becomes teacher_io. FailedPrecondition without a teacher.
  virtual absl::StatusOr<c10::IValue> TeacherOutput(Batch& batch) = 0;
  // The module paths the stage hooks on `role`'s model (torchdistill's target_*_pairs).
  virtual std::vector<std::string> hooked_paths(ModelRole role) const = 0;
  // The post-forward process function (backward, clipping, optimizer and scheduler steps).
  // `kwargs` over the config's.
  virtual absl::Status PostForward(const at::Tensor& loss, const Kwargs& kwargs = {}) = 0;
  virtual DataLoader& train_loader() = 0;
  // The I/O dicts of the last Forward (empty before one).
  virtual const IoDict& teacher_io() const = 0;
  virtual const IoDict& student_io() const = 0;
  virtual torch::optim::Optimizer& optimizer() = 0;
  virtual LrScheduler* scheduler() = 0;  // null: none
  virtual Criterion& criterion() = 0;
  // The stage's auxiliary modules by name (Box::AuxiliaryModules).
  virtual std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>
  auxiliary_modules() const = 0;

  // One epoch of training (epoch counts from 0) over the step API above: the mean loss.
  // `profiler` (null: none) steps after every training step.
  virtual absl::StatusOr<double> TrainEpoch(int64_t epoch, const BoxOptions& options, int log_every,
                                            Profiler* profiler) = 0;
  // The student's validation loss and metrics (empty without a validation loader).
  virtual absl::StatusOr<std::map<std::string, double>> Evaluate() = 0;
  // The student's loss and metrics on `loader` (the test set), computed as
  // Evaluate does.
  virtual absl::StatusOr<std::map<std::string, double>> Test(
      const LoaderConfig& loader, const std::map<std::string, std::shared_ptr<Dataset>>& datasets,
      int64_t seed) = 0;
  // The stage's post-epoch process function.
  virtual absl::Status PostEpoch(std::optional<double> metric) = 0;

  // What a checkpoint keeps of the stage: optimizer, scheduler, grad count, losses' state.
  virtual void SaveTo(c10::impl::GenericDict& dict) const = 0;
  virtual absl::Status LoadFrom(const c10::impl::GenericDict& dict) = 0;

  virtual const std::string& name() const = 0;
  virtual const StageConfig& config() const = 0;
  // The model the stage runs for `role` (null: no teacher): the box's, or the chain its
  // `sequential` section makes of it.
  virtual Model* model(ModelRole role) = 0;
  // Keeps `model` (a chain this stage runs on) alive as long as the stage and its hooks.
  virtual void KeepModel(std::unique_ptr<Model> model) = 0;
  // The student Evaluate and Test run: the stage's own by default; the whole student where the
  // stage trains a chain of it (torchdistill's scripts evaluate the model they built).
  virtual void SetEvaluatedStudent(Model* student) = 0;
  // The teacher cache's counts since the last call (what TeacherCacheReport reports); nullopt
  // without a teacher.
  virtual std::optional<TeacherCacheReport> TakeTeacherCacheReport() = 0;
  // The first parameter group's learning rate.
  virtual double lr() const = 0;
  virtual int64_t train_samples_per_epoch() const = 0;
};

// A stage over `teacher` (null: none) and `student`, batches on `device`,
// forwards and losses in `precision` (autocast; FP16 with loss scaling); Build
// it next.
// `group` (null: a single process) is the run's process group: the training loader gives this
// rank its shard, and a student with wrapper DISTRIBUTED_DATA_PARALLEL averages its gradients
// across the ranks (distill/boxes/distributed/ddp.h). `lr_factor` multiplies the learning rates
// the config gives (BoxOptions.lr_factor).
std::unique_ptr<StageRun> NewStage(Model* teacher, Model* student, c10::Device device,
                                   RunConfig::Precision precision,
                                   const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                   double lr_factor = 1.0);

}  // namespace boxes_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_INTERNAL_STAGE_H_
