// What a box reads and writes around its stages and epochs: the run's checkpoints (every
// epoch, the best, each stage's end), the checkpoint a run resumes from and its stage's state,
// and the stages' own model checkpoints (src_ckpt, dst_ckpt).
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "distill/boxes/checkpoint.h"
#include "distill/boxes/internal/box_impl.h"

namespace kd {
namespace boxes_internal {

namespace fs = std::filesystem;

absl::Status BoxImpl::StartStage(StageRun& stage) {
  const StageConfig& stage_config = stage.config();
  for (const auto& [model, config, role] :
       {std::tuple<Model*, const StageModelConfig*, const char*>{
            stage.model(ModelRole::kStudent), &stage_config.student(), "student"},
        {stage.model(ModelRole::kTeacher), &stage_config.teacher(), "teacher"}}) {
    if (model == nullptr || config->src_ckpt().empty()) continue;
    const absl::Status loaded =
        model->LoadState(ResolveAgainst(options_.base_dir, config->src_ckpt()));
    if (!loaded.ok()) {
      return WithContext(absl::StrCat("stage \"", stage.name(), "\" ", role, ".src_ckpt"), loaded);
    }
  }
  return absl::OkStatus();
}

absl::Status BoxImpl::EndStage(StageRun& stage) {
  if (rank_ != 0) return absl::OkStatus();  // in a multi-process run rank 0 writes
  for (const auto& [model, config] :
       {std::pair<Model*, const StageModelConfig*>{stage.model(ModelRole::kStudent),
                                                   &stage.config().student()},
        {stage.model(ModelRole::kTeacher), &stage.config().teacher()}}) {
    if (model == nullptr || config->dst_ckpt().empty()) continue;
    const std::string path = ResolveAgainst(options_.base_dir, config->dst_ckpt());
    KD_RETURN_IF_ERROR(CreateDirectories(fs::path(path).parent_path().string()));
    KD_RETURN_IF_ERROR(model->SaveState(path));
  }
  return absl::OkStatus();
}

absl::Status BoxImpl::LoadStage(StageRun& stage, const c10::impl::GenericDict& saved,
                                const std::string& path) {
  const absl::Status status =
      CallTorchFlat([&] { return stage.LoadFrom(saved); }, absl::StatusCode::kInvalidArgument);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path,
                                                   ": the checkpoint's state does not fit stage \"",
                                                   stage.name(), "\": ", status.message()));
  }
  return absl::OkStatus();
}

absl::Status BoxImpl::CreateDirectories(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create the folder ", dir, ": ", error.message()));
  }
  return absl::OkStatus();
}

absl::Status BoxImpl::Checkpoint(const StageRun& stage, size_t stage_index, int64_t epochs_done,
                                 std::optional<double> metric, bool lower_is_better) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("format", std::string(kCheckpointFormat));
  dict.insert("stage", static_cast<int64_t>(stage_index));
  dict.insert("stage_name", stage.name());
  // A finished stage resumes at the start of the next one.
  const bool stage_done = epochs_done >= stage.config().num_epochs();
  dict.insert("epoch", epochs_done);
  const bool improved =
      metric.has_value() &&
      (std::isnan(best_) || (lower_is_better ? *metric < best_ : *metric > best_));
  if (improved) best_ = *metric;
  dict.insert("best", best_);
  dict.insert("student", StateDict(*student_));
  if (teacher_ != nullptr) dict.insert("teacher", StateDict(*teacher_));
  stage.SaveTo(dict);
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    dict.insert("rng", generator.get_state());
  }
  if (stage_done && stage_index + 1 < stages_.size()) {
    dict.insert_or_assign("stage", static_cast<int64_t>(stage_index + 1));
    dict.insert_or_assign("epoch", int64_t{0});
    dict.insert("fresh_stage", true);
  }
  if (rank_ != 0) return absl::OkStatus();  // in a multi-process run rank 0 writes them
  return WriteCheckpointFiles(c10::IValue(dict), ckpt_dir_, config_.checkpoint(), stage.name(),
                              epochs_done, improved, stage_done);
}

absl::Status BoxImpl::ReadResume() {
  const std::string path =
      !config_.checkpoint().resume_from().empty()
          ? ResolveAgainst(options_.base_dir, config_.checkpoint().resume_from())
          : (options_.resume ? LastPath() : "");
  if (path.empty()) return absl::OkStatus();
  // Whether something is there, link or not: a link that loops or dangles is read and named
  // by the reader (fs::exists would throw on a loop).
  std::error_code present_error;
  if (!fs::exists(fs::symlink_status(path, present_error))) {
    if (!config_.checkpoint().resume_from().empty()) {
      return absl::NotFoundError(absl::StrCat("checkpoint.resume_from: no file ", path));
    }
    return absl::NotFoundError(absl::StrCat("--resume: run folder ", run_dir_,
                                            " has no checkpoint to resume (", path,
                                            "); drop --resume to start a fresh run"));
  }
  KD_ASSIGN_OR_RETURN(c10::impl::GenericDict saved, ReadCheckpoint(path));
  const size_t stage = static_cast<size_t>(saved.at("stage").toInt());
  if (stage >= stages_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the checkpoint is at stage ", stage, ", but the config has ",
                     stages_.size(), stages_.size() == 1 ? " stage" : " stages",
                     " (a checkpoint of another config?)"));
  }
  const int64_t epoch = saved.at("epoch").toInt();  // epochs completed in that stage
  if (epoch < 0 || epoch > stages_[stage].num_epochs()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the checkpoint is after epoch ", epoch, " of stage \"", stages_[stage].name(),
        "\", which has ", stages_[stage].num_epochs(), " (a checkpoint of another config?)"));
  }
  best_ = saved.at("best").toDouble();
  KD_RETURN_IF_ERROR(LoadStateDict(*student_, saved.at("student"), path));
  if (teacher_ != nullptr && saved.contains("teacher")) {
    KD_RETURN_IF_ERROR(LoadStateDict(*teacher_, saved.at("teacher"), path));
  }
  int64_t stage_start = 0;
  for (size_t s = 0; s < stage; ++s) stage_start += stages_[s].num_epochs();
  resume_ = Resumed{.saved = std::move(saved),
                    .path = path,
                    .stage = stage,
                    .epoch = epoch,
                    .stage_start = stage_start};
  // The step API starts in the checkpoint's stage.
  stage_index_ = stage;
  stage_start_ = stage_start;
  next_epoch_ = start_epoch();
  return absl::OkStatus();
}

absl::Status BoxImpl::EnterResumedStage(StageRun& stage) {
  // A checkpoint written at a stage's end starts the next stage afresh (its src_ckpt loaded); one
  // inside a stage carries the stage's optimizer, scheduler and losses.
  if (resume_->saved.contains("fresh_stage")) {
    KD_RETURN_IF_ERROR(StartStage(stage));
  } else {
    KD_RETURN_IF_ERROR(LoadStage(stage, resume_->saved, resume_->path));
  }
  const at::Tensor rng = resume_->saved.at("rng").toTensor();
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(rng);
  return absl::OkStatus();
}

}  // namespace boxes_internal
}  // namespace kd
