#include "distill/config/teacher_extras.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "distill/config/proc_fields.h"

namespace kd {
namespace {

// No teacher, or one that trains in `stage`: neither extra applies.
std::string TeacherObstacle(const StageConfig& stage, bool has_teacher) {
  if (!has_teacher) return "the run has no teacher";
  if (stage.teacher().has_requires_grad() && stage.teacher().requires_grad()) {
    return "the teacher trains in this stage (teacher.requires_grad)";
  }
  if (stage.teacher_mode() == StageConfig::TEACHER_AS_IS) {
    return "teacher_mode TEACHER_AS_IS: the teacher may run in train mode, where its output "
           "depends on its batch";
  }
  return "";
}

}  // namespace

std::string TeacherCacheObstacle(const StageConfig& stage, bool has_teacher,
                                 const DatasetConfig* train_dataset) {
  if (std::string obstacle = TeacherObstacle(stage, has_teacher); !obstacle.empty()) {
    return obstacle;
  }
  const std::string& proc = stage.teacher().forward_proc().key();
  if (!proc.empty() && proc != "forward_batch_only") {
    return absl::StrCat("the teacher's forward_proc \"", proc,
                        "\" may read more of a batch than its rows (only forward_batch_only is "
                        "cached)");
  }
  for (const ForwardHookConfig& hook : stage.teacher().forward_hooks()) {
    if (hook.accumulates()) {
      return absl::StrCat("the teacher's hook on \"", hook.module_path(),
                          "\" accumulates calls (their values are not rows of the batch)");
    }
  }
  if (train_dataset != nullptr && train_dataset->has_wrapper()) {
    return absl::StrCat("the training dataset \"", train_dataset->id(), "\" is wrapped (",
                        train_dataset->wrapper().key(),
                        "): its samples are not known from an index and transform");
  }
  return "";
}

std::string TeacherOverlapObstacle(const StageConfig& stage, bool has_teacher) {
  if (std::string obstacle = TeacherObstacle(stage, has_teacher); !obstacle.empty()) {
    return obstacle;
  }
  return PreForwardObstacle(stage);
}

std::string PreForwardObstacle(const StageConfig& stage) {
  const std::string pre_forward = ProcKey(stage, kPreForwardProcKind);
  if (!pre_forward.empty() && pre_forward != "default_pre_forward_process") {
    return absl::StrCat("the stage's pre_forward_proc \"", pre_forward,
                        "\" would run on the next batch before this one's step");
  }
  return "";
}

}  // namespace kd
