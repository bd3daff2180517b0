#include "distill/procs/testing/fake_training_context.h"

#include "absl/strings/str_cat.h"

namespace kd {
namespace test {
namespace {

const char* RoleName(ModelRole role) { return role == ModelRole::kTeacher ? "teacher" : "student"; }

}  // namespace

c10::IValue FakeModel::Forward(std::vector<c10::IValue> args, const Kwargs& kwargs) {
  calls.push_back({std::move(args), kwargs});
  return static_cast<int64_t>(calls.size());
}

absl::StatusOr<HookHandle> FakeModel::AddHook(absl::string_view path, HookFn, HookValues) {
  return absl::UnimplementedError(absl::StrCat("FakeModel has no taps (", path, ")"));
}

Model* FakeTrainingContext::model(ModelRole role) {
  if (role == ModelRole::kStudent) return &student;
  return with_teacher_ ? &teacher : nullptr;
}

void FakeTrainingContext::ClearIo(ModelRole role) {
  log.push_back(absl::StrCat("ClearIo(", RoleName(role), ")"));
}

void FakeTrainingContext::SetSamplerEpoch(int64_t epoch) {
  log.push_back(absl::StrCat("SetSamplerEpoch(", epoch, ")"));
}

void FakeTrainingContext::Barrier() { log.push_back("Barrier"); }

int64_t FakeTrainingContext::IncrementStageGradCount() {
  ++stage_grad_count;
  log.push_back(absl::StrCat("IncrementStageGradCount -> ", stage_grad_count));
  return stage_grad_count;
}

void FakeTrainingContext::Backward(const at::Tensor& loss) {
  log.push_back(absl::StrCat("Backward(", loss.item<double>(), ")"));
}

void FakeTrainingContext::ClipGradNorm(double max_norm) {
  log.push_back(absl::StrCat("ClipGradNorm(", max_norm, ")"));
}

void FakeTrainingContext::OptimizerStep() { log.push_back("OptimizerStep"); }

void FakeTrainingContext::ZeroGrad() { log.push_back("ZeroGrad"); }

void FakeTrainingContext::SchedulerStep(const SchedulerStepArgs& args) {
  log.push_back(
      absl::StrCat("SchedulerStep(metric=", args.metric ? absl::StrCat(*args.metric) : "-",
                   ", epoch=", args.epoch ? absl::StrCat(*args.epoch) : "-", ")"));
}

void FakeTrainingContext::AuxiliaryPostEpoch(ModelRole role) {
  log.push_back(absl::StrCat("AuxiliaryPostEpoch(", RoleName(role), ")"));
}

}  // namespace test
}  // namespace kd
