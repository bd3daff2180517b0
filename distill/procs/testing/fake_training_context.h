// Fakes for testing process functions: a Model that records its forward calls and a
// TrainingContext that records what is done to it.
//
//   kd::test::FakeTrainingContext box(/*with_teacher=*/true);
//   box.grad_accum_step_value = 2;
//   ASSERT_THAT(kd::DefaultPostForwardProcess(box, loss, std::nullopt, {}), kd::IsOk());
//   EXPECT_THAT(box.log, ElementsAre("IncrementStageGradCount -> 1", "Backward(0.5)"));
#ifndef LIBKD_DISTILL_PROCS_TESTING_FAKE_TRAINING_CONTEXT_H_
#define LIBKD_DISTILL_PROCS_TESTING_FAKE_TRAINING_CONTEXT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "distill/procs/training_context.h"
#include "hooks/model.h"

namespace kd {
namespace test {

// A model with no modules whose forward records its arguments and returns the call count.
class FakeModel final : public Model {
 public:
  struct Call {
    std::vector<c10::IValue> args;
    Kwargs kwargs;
  };

  std::string kind() const override { return "fake"; }
  c10::IValue Forward(std::vector<c10::IValue> args, const Kwargs& kwargs = {}) override;
  std::vector<ModuleInfo> NamedModules() const override { return {{"", "Fake"}}; }
  std::vector<NamedTensor> NamedParameters() const override { return {}; }
  std::vector<NamedTensor> NamedBuffers() const override { return {}; }
  void SetTraining(bool training) override { training_ = training; }
  bool is_training() const override { return training_; }
  absl::StatusOr<HookHandle> AddHook(absl::string_view path, HookFn fn,
                                     HookValues values) override;
  absl::Status CheckHooksFired() const override { return absl::OkStatus(); }

  std::vector<Call> calls;

 private:
  bool training_ = false;
};

// A box whose state tests set directly and whose actions are logged in order, one line each:
// "ClearIo(teacher)", "SetSamplerEpoch(3)", "Barrier", "IncrementStageGradCount -> 2",
// "Backward(0.25)", "ClipGradNorm(5)", "OptimizerStep", "ZeroGrad",
// "SchedulerStep(metric=0.5, epoch=2)" (absent values print as "-"),
// "AuxiliaryPostEpoch(student)".
class FakeTrainingContext final : public TrainingContext {
 public:
  explicit FakeTrainingContext(bool with_teacher) : with_teacher_(with_teacher) {}

  Model* model(ModelRole role) override;
  void ClearIo(ModelRole role) override;
  bool distributed() const override { return distributed_value; }
  void SetSamplerEpoch(int64_t epoch) override;
  void Barrier() override;
  int64_t IncrementStageGradCount() override;
  int64_t grad_accum_step() const override { return grad_accum_step_value; }
  std::optional<double> max_grad_norm() const override { return max_grad_norm_value; }
  void Backward(const at::Tensor& loss) override;
  void ClipGradNorm(double max_norm) override;
  void OptimizerStep() override;
  void ZeroGrad() override;
  bool has_scheduler() const override { return has_scheduler_value; }
  int64_t scheduling_step() const override { return scheduling_step_value; }
  void SchedulerStep(const SchedulerStepArgs& args) override;
  void AuxiliaryPostEpoch(ModelRole role) override;

  FakeModel teacher;
  FakeModel student;
  bool distributed_value = false;
  int64_t grad_accum_step_value = 1;
  std::optional<double> max_grad_norm_value;
  bool has_scheduler_value = false;
  int64_t scheduling_step_value = 0;
  int64_t stage_grad_count = 0;
  std::vector<std::string> log;

 private:
  const bool with_teacher_;
};

}  // namespace test
}  // namespace kd

#endif  // LIBKD_DISTILL_PROCS_TESTING_FAKE_TRAINING_CONTEXT_H_
