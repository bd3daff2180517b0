// The step API of a box (distill/boxes/box.h): torchdistill's pre-epoch, pre-forward, forward,
// post-forward, post-epoch and advance-to-next-stage calls on the current stage, in their order.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "distill/boxes/internal/box_impl.h"

namespace kd {
namespace boxes_internal {

absl::Status BoxImpl::PreEpoch(int64_t epoch) {
  KD_ASSIGN_OR_RETURN(StageRun * stage, Current());
  if (step_ != Step::kNoEpoch) {
    return Misuse("PreEpoch", absl::StrCat("epoch ", epoch_ + 1,
                                           " is still open: end it with "
                                           "PostEpoch first"));
  }
  const int64_t end = stage_start_ + stage_num_epochs();
  if (epoch < start_epoch()) {
    return Misuse("PreEpoch", absl::StrCat("epoch ", epoch, " was done before the checkpoint ",
                                           resume_->path, " this box resumes: the loop starts "
                                           "at start_epoch(), ", start_epoch()));
  }
  if (epoch < stage_start_ || epoch >= end) {
    return Misuse("PreEpoch", absl::StrCat(
        "epoch ", epoch, " is outside stage \"", stages_[stage_index_].name(), "\", which covers "
        "the run's epochs ", stage_start_, " to ", end - 1, ": epochs count over the whole run "
        "(num_epochs() is the run's, ", num_epochs(), "), and PostEpoch moves to the next stage "
        "after a stage's last epoch, as torchdistill's boxes do"));
  }
  KD_RETURN_IF_ERROR(stage->PreEpoch(epoch - stage_start_));  // the stage's own epoch, as Run
  epoch_ = epoch;
  step_ = Step::kInEpoch;
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> BoxImpl::Forward(Batch& batch) {
  KD_ASSIGN_OR_RETURN(StageRun * stage, Current());
  if (step_ != Step::kInEpoch) return Misuse("Forward", DueInstead());
  KD_ASSIGN_OR_RETURN(CriterionResult result, stage->Forward(batch));
  step_ = Step::kForwarded;
  forwarded_ = true;
  teacher_forwarded_ = true;
  return result.total;
}

absl::Status BoxImpl::PostForward(const at::Tensor& loss, const Kwargs& kwargs) {
  KD_ASSIGN_OR_RETURN(StageRun * stage, Current());
  if (step_ == Step::kNoEpoch) return Misuse("PostForward", DueInstead());
  if (!loss.defined() || loss.numel() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("PostForward: the loss must be one value (a scalar tensor), got ",
                     loss.defined() ? absl::StrCat(loss.numel(), " values")
                                    : std::string("an undefined tensor")));
  }
  KD_RETURN_IF_ERROR(stage->PostForward(loss, kwargs));
  step_ = Step::kInEpoch;
  return absl::OkStatus();
}

absl::Status BoxImpl::PostEpoch(const std::map<std::string, double>& metrics) {
  KD_ASSIGN_OR_RETURN(StageRun * stage, Current());
  if (step_ != Step::kInEpoch) return Misuse("PostEpoch", DueInstead());
  std::optional<double> metric;
  if (auto it = metrics.find(PrimaryMetric()); it != metrics.end()) metric = it->second;
  KD_RETURN_IF_ERROR(stage->PostEpoch(metric));
  step_ = Step::kNoEpoch;
  next_epoch_ = epoch_ + 1;
  // As Run: the stage's models to their dst_ckpt before the checkpoint that ends the stage.
  const int64_t done = next_epoch_ - stage_start_;  // the stage's epochs done
  const bool stage_done = done == stage_num_epochs();
  if (stage_done) KD_RETURN_IF_ERROR(EndStage(*stage));
  KD_RETURN_IF_ERROR(
      Checkpoint(*stage, stage_index_, done, metric, config_.evaluation().lower_is_better()));
  // torchdistill's multi-stage post_epoch_process: after the stage's last epoch, the next stage.
  if (stage_done && stage_index_ + 1 < stages_.size()) return NextStage();
  return absl::OkStatus();
}

absl::Status BoxImpl::AdvanceToNextStage() {
  KD_RETURN_IF_ERROR(Current().status());
  if (step_ != Step::kNoEpoch) return Misuse("AdvanceToNextStage", DueInstead());
  if (stage_index_ + 1 >= stages_.size()) {
    return absl::OutOfRangeError(absl::StrCat(
        "AdvanceToNextStage: stage \"", stages_[stage_index_].name(), "\" is the last of ",
        stages_.size(), stages_.size() == 1 ? " stage" : " stages"));
  }
  KD_RETURN_IF_ERROR(EndStage(*current_));  // torchdistill's save_stage_ckpt
  return NextStage();
}

absl::Status BoxImpl::NextStage() {
  current_.reset();  // its hooks go with it
  ++stage_index_;
  stage_start_ = next_epoch_;  // the new stage covers the run's next epochs
  forwarded_ = false;
  teacher_forwarded_ = false;
  return Current().status();
}

absl::StatusOr<const IoDict*> BoxImpl::TeacherIoDict() {
  KD_ASSIGN_OR_RETURN(StageRun * stage, Current());
  if (teacher_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("TeacherIoDict: a ", kind(), " has no teacher"));
  }
  if (!teacher_forwarded_) {
    return Misuse("TeacherIoDict", "no Forward or TeacherOutput in this stage yet");
  }
  return &stage->teacher_io();
}

absl::StatusOr<c10::IValue> BoxImpl::TeacherOutput(Batch& batch) {
  KD_ASSIGN_OR_RETURN(StageRun * stage, Current());
  if (step_ == Step::kForwarded) return Misuse("TeacherOutput", DueInstead());
  KD_ASSIGN_OR_RETURN(c10::IValue output, stage->TeacherOutput(batch));
  teacher_forwarded_ = true;
  return output;
}

absl::StatusOr<std::vector<std::string>> BoxImpl::TeacherHookedPaths() {
  KD_ASSIGN_OR_RETURN(StageRun * stage, Current());
  if (teacher_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("TeacherHookedPaths: a ", kind(), " has no teacher"));
  }
  return stage->hooked_paths(ModelRole::kTeacher);
}

absl::StatusOr<StageRun*> BoxImpl::Current() {
  stepped_ = true;
  if (current_ == nullptr) {
    KD_ASSIGN_OR_RETURN(current_, BuildStage(stage_index_));
  }
  if (started_ != stage_index_) {  // once per stage: CleanModules' rebuild does not reload
    if (resume_.has_value() && stage_index_ == resume_->stage && !started_.has_value()) {
      KD_RETURN_IF_ERROR(EnterResumedStage(*current_));
    } else {
      KD_RETURN_IF_ERROR(StartStage(*current_));
    }
    started_ = stage_index_;
  }
  return current_.get();
}

std::string BoxImpl::DueInstead() const {
  switch (step_) {
    case Step::kNoEpoch:
      return "no epoch is open: call PreEpoch(epoch) first";
    case Step::kInEpoch:
      return absl::StrCat("epoch ", epoch_ + 1,
                          " is open: Forward a batch, or end it with PostEpoch");
    case Step::kForwarded:
      return "a Forward's loss awaits PostForward(loss)";
  }
  return "";
}

absl::Status BoxImpl::SaveStageCheckpoint() {
  KD_RETURN_IF_ERROR(Current().status());
  if (step_ == Step::kForwarded) return Misuse("SaveStageCheckpoint", DueInstead());
  return EndStage(*current_);
}

absl::Status BoxImpl::CleanModules() {
  if (step_ != Step::kNoEpoch) return Misuse("CleanModules", DueInstead());
  current_.reset();  // its hook managers remove their hooks; its I/O dicts go
  forwarded_ = false;
  teacher_forwarded_ = false;
  for (Model* model : {student_.get(), teacher_.get()}) {
    if (model == nullptr) continue;
    for (const auto& [name, param] : model->NamedParameters()) {
      at::Tensor p = param;
      p.requires_grad_(true);
    }
  }
  return absl::OkStatus();
}

}  // namespace boxes_internal
}  // namespace kd
