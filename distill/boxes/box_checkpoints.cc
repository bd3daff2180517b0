// What a box reads and writes around its stages and epochs: the run's checkpoints (every
// epoch, the best, each stage's end), a resumed stage's state, and the stages' own model
// checkpoints (src_ckpt, dst_ckpt).
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

}  // namespace boxes_internal
}  // namespace kd
