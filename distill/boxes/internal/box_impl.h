// The box behind kd::MakeBox (distill/boxes/box.h): the run's models, datasets, process group
// and run folder, its stages in order, and the step API over the current stage. Its parts:
// box.cc (set-up, Run, checkpoints), box_steps.cc (the step API).
#ifndef LIBKD_DISTILL_BOXES_INTERNAL_BOX_IMPL_H_
#define LIBKD_DISTILL_BOXES_INTERNAL_BOX_IMPL_H_

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "distill/boxes/box.h"
#include "distill/boxes/distributed/rank_monitor.h"
#include "distill/boxes/internal/stage.h"
#include "distill/boxes/run_folder.h"
#include "distill/data/dataset.h"
#include "hooks/model.h"

namespace kd {
namespace boxes_internal {

class BoxImpl final : public Box {
 public:
  BoxImpl(DistillConfig config, BoxOptions options, BoxInputs inputs = {})
      : config_(std::move(config)), options_(std::move(options)), inputs_(std::move(inputs)) {}

  absl::Status Init();

  std::string kind() const override {
    const bool multi = stages_.size() > 1 || !config_.stages().empty();
    return absl::StrCat(multi ? "MultiStages" : "", teacher_ ? "DistillationBox" : "TrainingBox");
  }

  // In a multi-process run, an error caused by a lost or failed rank becomes the monitor's
  // account naming it; a rank's own error is reported to the others before it returns.
  absl::StatusOr<RunResult> Run() override;

 private:
  absl::StatusOr<RunResult> RunStages();

  // The step API (box.h).
  absl::Status PreEpoch(int64_t epoch) override;

  absl::Status PreForward(Batch& batch) override {
    KD_ASSIGN_OR_RETURN(StageRun * stage, Current());
    if (step_ != Step::kInEpoch) return Misuse("PreForward", DueInstead());
    return stage->PreForward(batch);
  }

  absl::StatusOr<at::Tensor> Forward(Batch& batch) override;

  absl::Status PostForward(const at::Tensor& loss, const Kwargs& kwargs) override;

  absl::StatusOr<std::map<std::string, double>> Evaluate() override {
    KD_ASSIGN_OR_RETURN(StageRun * stage, Current());
    if (step_ == Step::kForwarded) return Misuse("Evaluate", DueInstead());
    return stage->Evaluate();
  }

  absl::Status PostEpoch(const std::map<std::string, double>& metrics) override;

  absl::Status AdvanceToNextStage() override;
  // The next stage, without saving the current one's dst_ckpt (its caller did).
  absl::Status NextStage();

  absl::StatusOr<DataLoader*> TrainLoader() override {
    KD_ASSIGN_OR_RETURN(StageRun * stage, Current());
    return &stage->train_loader();
  }

  absl::StatusOr<c10::IValue> TeacherOutput(Batch& batch) override;
  absl::StatusOr<std::vector<std::string>> TeacherHookedPaths() override;
  absl::StatusOr<std::vector<std::string>> StudentHookedPaths() override {
    KD_ASSIGN_OR_RETURN(StageRun * stage, Current());
    return stage->hooked_paths(ModelRole::kStudent);
  }
  absl::StatusOr<const IoDict*> TeacherIoDict() override;

  absl::StatusOr<const IoDict*> StudentIoDict() override {
    KD_ASSIGN_OR_RETURN(StageRun * stage, Current());
    if (!forwarded_) return Misuse("StudentIoDict", "no Forward in this stage yet");
    return &stage->student_io();
  }

  absl::StatusOr<torch::optim::Optimizer*> Optimizer() override {
    KD_ASSIGN_OR_RETURN(StageRun * stage, Current());
    return &stage->optimizer();
  }
  absl::StatusOr<LrScheduler*> Scheduler() override {
    KD_ASSIGN_OR_RETURN(StageRun * stage, Current());
    return stage->scheduler();
  }
  absl::StatusOr<Criterion*> StageCriterion() override {
    KD_ASSIGN_OR_RETURN(StageRun * stage, Current());
    return &stage->criterion();
  }
  absl::StatusOr<std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>>
  AuxiliaryModules() override {
    KD_ASSIGN_OR_RETURN(StageRun * stage, Current());
    return stage->auxiliary_modules();
  }
  absl::Status CleanModules() override;
  absl::Status SaveStageCheckpoint() override;
  Model& student() override { return *student_; }
  Model* teacher() override { return teacher_.get(); }
  int64_t num_epochs() const override {
    int64_t epochs = 0;
    for (const StageConfig& stage : stages_) epochs += stage.num_epochs();
    return epochs;
  }
  std::shared_ptr<Dataset> dataset(const std::string& id) const override {
    auto it = datasets_.find(id);
    return it == datasets_.end() ? nullptr : it->second;
  }
  std::string checkpoint_dir() const override { return ckpt_dir_; }
  int64_t start_epoch() const override {
    return resume_.has_value() ? resume_->stage_start + resume_->epoch : 0;
  }
  size_t stage_index() const override { return stage_index_; }
  int64_t stage_num_epochs() const override { return stages_[stage_index_].num_epochs(); }
  int64_t stage_start_epoch() const override { return stage_start_; }
  size_t num_stages() const override { return stages_.size(); }

  // The stage the step API drives, built on first use.
  absl::StatusOr<StageRun*> Current();

  // A call out of the step API's order.
  static absl::Status Misuse(absl::string_view call, absl::string_view why) {
    return absl::FailedPreconditionError(absl::StrCat(call, " out of order: ", why));
  }

  // What the step API expects next, for Misuse.
  std::string DueInstead() const;

  // The metric that chooses checkpoints and steps ReduceLROnPlateau: evaluation.primary_metric,
  // else the first metric's name, else "loss".
  std::string PrimaryMetric() const;

  std::string LastPath() const { return (std::filesystem::path(ckpt_dir_) / "last.pt").string(); }

  // `stage` starting afresh: its models' src_ckpt loaded (torchdistill's stage setup).
  absl::Status StartStage(StageRun& stage);
  // `stage` ending: its models' dst_ckpt written (torchdistill's save_stage_ckpt).
  absl::Status EndStage(StageRun& stage);

  // Stage `s` built on the box's models (or the chains its `sequential` sections make of them)
  // and datasets; errors name the stage.
  absl::StatusOr<std::unique_ptr<StageRun>> BuildStage(size_t s);

  // Puts the best student by validation (best.pt, written by this run or the one it resumes)
  // in the student's place, as torchdistill's scripts keep the best checkpoint; without
  // validation (or best.pt) the final one stays. Every rank gets rank 0's choice.
  absl::Status ChooseStudent(RunResult& result);

  // The test set's metrics of the chosen student (ChooseStudent). `last_stage` is null when a
  // resumed run had no stage left to train: the last stage is built for testing then.
  absl::Status Test(std::unique_ptr<StageRun> last_stage, RunResult& result);

  // kd::CheckCheckpoint checked the keys' types; what they hold can still disagree with the
  // stage (another optimizer, other shapes), which libtorch throws for.
  static absl::Status LoadStage(StageRun& stage, const c10::impl::GenericDict& saved,
                                const std::string& path);

  static absl::Status CreateDirectories(const std::string& dir);

  // The checkpoint a resumed run continues from (BoxOptions.resume: the run folder's last.pt;
  // checkpoint.resume_from), read by Init: the models' weights and the best metric restored
  // there, the stage's state and the RNG when the stage is entered (EnterResumedStage).
  struct Resumed {
    c10::impl::GenericDict saved;
    std::string path;
    size_t stage = 0;
    int64_t epoch = 0;        // epochs done in that stage
    int64_t stage_start = 0;  // the run's epoch the stage starts at
  };
  absl::Status ReadResume();
  // The resumed stage entered: its optimizer, scheduler and losses from the checkpoint (or its
  // src_ckpt, for a checkpoint written at the previous stage's end), then the RNG state.
  absl::Status EnterResumedStage(StageRun& stage);

  absl::Status Checkpoint(const StageRun& stage, size_t stage_index, int64_t epochs_done,
                          std::optional<double> metric, bool lower_is_better);

  DistillConfig config_;
  BoxOptions options_;
  BoxInputs inputs_;  // the caller's objects, moved into the box's members by Init
  std::vector<StageConfig> stages_;
  int64_t seed_ = 0;
  c10::Device device_ = c10::Device(c10::kCPU);
  std::string run_dir_, ckpt_dir_;
  std::map<std::string, std::shared_ptr<Dataset>> datasets_;
  std::unique_ptr<Model> teacher_, student_;
  double best_ = NAN;
  std::optional<Resumed> resume_;  // null: a fresh run
  int rank_ = 0;                                  // this process's; only rank 0 writes
  c10::intrusive_ptr<c10d::ProcessGroup> group_;  // null: one process
  std::unique_ptr<RankMonitor> monitor_;          // with group_
  std::optional<RunFolder> folder_;               // rank 0's, held for the box's life
  // The step API's state: where the caller is in torchdistill's loop, and the stage it drives.
  enum class Step { kNoEpoch, kInEpoch, kForwarded };
  Step step_ = Step::kNoEpoch;
  bool stepped_ = false;            // the step API was used: Run refuses
  bool forwarded_ = false;          // a Forward in the current stage
  bool teacher_forwarded_ = false;  // a Forward or TeacherOutput in the current stage
  int64_t epoch_ = 0;        // the run's epoch of the last PreEpoch
  int64_t next_epoch_ = 0;   // the run's epoch after the last PostEpoch
  int64_t stage_start_ = 0;  // the run's epoch the current stage starts at
  size_t stage_index_ = 0;
  std::optional<size_t> started_;  // the stage whose src_ckpt the step API has loaded
  std::unique_ptr<StageRun> current_;
};

}  // namespace boxes_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_INTERNAL_BOX_IMPL_H_
