#include "distill/procs/default_procs.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kd {
namespace {

// The models of a box with a teacher; FailedPrecondition naming `key` if it has none.
absl::Status CheckTeacher(TrainingContext& box, absl::string_view key,
                          absl::string_view alternative) {
  if (box.model(ModelRole::kTeacher) != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(key, " needs a teacher, and this box has none; use ", alternative, " instead"));
}

Model& Student(TrainingContext& box) { return *box.model(ModelRole::kStudent); }

// The epoch-wise scheduler step both default post-epoch processes begin with.
void EpochwiseSchedulerStep(TrainingContext& box, std::optional<double> metric) {
  if (box.has_scheduler() && box.scheduling_step() <= 0) {
    box.SchedulerStep({metric, /*epoch=*/std::nullopt});
  }
}

}  // namespace

absl::Status DefaultPreEpochProcessWithTeacher(TrainingContext& box, int64_t epoch, const Kwargs&) {
  KD_RETURN_IF_ERROR(
      CheckTeacher(box, PreEpochProc::kDefaultKey, PreEpochProc::kDefaultKeyWithoutTeacher));
  box.ClearIo(ModelRole::kTeacher);
  box.ClearIo(ModelRole::kStudent);
  // torchdistill 1.1.5 never sets the teacher's mode; libkd's default puts it in eval mode.
  if (box.teacher_in_eval_mode()) box.model(ModelRole::kTeacher)->SetTraining(false);
  Student(box).SetTraining(true);
  if (box.distributed()) box.SetSamplerEpoch(epoch);
  return absl::OkStatus();
}

absl::Status DefaultPreEpochProcessWithoutTeacher(TrainingContext& box, int64_t epoch,
                                                  const Kwargs&) {
  box.ClearIo(ModelRole::kStudent);
  Student(box).SetTraining(true);
  if (box.distributed()) box.SetSamplerEpoch(epoch);
  return absl::OkStatus();
}

absl::Status DefaultPreForwardProcess(TrainingContext&, Batch&, const Kwargs&) {
  return absl::OkStatus();
}

absl::Status DefaultPostForwardProcess(TrainingContext& box, const at::Tensor& loss,
                                       std::optional<double> metric, const Kwargs&) {
  const int64_t count = box.IncrementStageGradCount();
  const int64_t accum = std::max<int64_t>(1, box.grad_accum_step());
  box.Backward(accum > 1 ? loss.div(static_cast<double>(accum)) : loss);
  const bool optimizer_step = count % accum == 0;
  if (optimizer_step) {
    if (std::optional<double> max_norm = box.max_grad_norm()) box.ClipGradNorm(*max_norm);
    box.OptimizerStep();
    box.ZeroGrad();
  }
  const int64_t scheduling_step = box.scheduling_step();
  if (box.has_scheduler() && scheduling_step > 0 && count % scheduling_step == 0 &&
      optimizer_step) {
    box.SchedulerStep({metric, count / scheduling_step});
  }
  return absl::OkStatus();
}

absl::Status DefaultPostEpochProcessWithTeacher(TrainingContext& box, std::optional<double> metric,
                                                const Kwargs&) {
  KD_RETURN_IF_ERROR(
      CheckTeacher(box, PostEpochProc::kDefaultKey, PostEpochProc::kDefaultKeyWithoutTeacher));
  EpochwiseSchedulerStep(box, metric);
  box.AuxiliaryPostEpoch(ModelRole::kTeacher);
  box.AuxiliaryPostEpoch(ModelRole::kStudent);
  if (box.distributed()) box.Barrier();
  return absl::OkStatus();
}

absl::Status DefaultPostEpochProcessWithoutTeacher(TrainingContext& box,
                                                   std::optional<double> metric, const Kwargs&) {
  EpochwiseSchedulerStep(box, metric);
  box.AuxiliaryPostEpoch(ModelRole::kStudent);
  if (box.distributed()) box.Barrier();
  return absl::OkStatus();
}

// The defaults take no kwargs: a config that gives them some is told so.
KD_REGISTER_PROC_FUNC(PreEpochProc, std::string(PreEpochProc::kDefaultKey),
                      DefaultPreEpochProcessWithTeacher, {});
KD_REGISTER_PROC_FUNC(PreEpochProc, std::string(PreEpochProc::kDefaultKeyWithoutTeacher),
                      DefaultPreEpochProcessWithoutTeacher, {});
KD_REGISTER_PROC_FUNC(PreForwardProc, std::string(PreForwardProc::kDefaultKey),
                      DefaultPreForwardProcess, {});
KD_REGISTER_PROC_FUNC(PostForwardProc, std::string(PostForwardProc::kDefaultKey),
                      DefaultPostForwardProcess, {});
KD_REGISTER_PROC_FUNC(PostEpochProc, std::string(PostEpochProc::kDefaultKey),
                      DefaultPostEpochProcessWithTeacher, {});
KD_REGISTER_PROC_FUNC(PostEpochProc, std::string(PostEpochProc::kDefaultKeyWithoutTeacher),
                      DefaultPostEpochProcessWithoutTeacher, {});

}  // namespace kd
