// Internal to distill/boxes: what a stage's feature_distillation (silverspoon-kd's holistic and
// blockwise distillers) needs beyond an ordinary stage: the projectors auto_projector infers
// from the shapes of a probe batch, and the blockwise step on the capture engine.
#ifndef LIBKD_DISTILL_BOXES_INTERNAL_FEATURE_STAGE_H_
#define LIBKD_DISTILL_BOXES_INTERNAL_FEATURE_STAGE_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "capture/module_capture_engine.h"
#include "distill/boxes/internal/stage_setup.h"
#include "distill/boxes/optim/optim.h"
#include "distill/config/distill_config.pb.h"
#include "distill/data/batch.h"
#include "distill/losses/criterion.h"
#include "hooks/model.h"

namespace kd {
namespace boxes_internal {

// silverspoon-kd's Alignment._try_infer_output_projector on the student's and the teacher's
// values: none for equal shapes; GenericConv2dProjector (no bias) for 4-d values whose
// channels alone differ; GenericLinearProjector (bias; `init` its initialization) for values
// whose last dimension alone differs. InvalidArgument naming both shapes otherwise.
// `run`'s value with `model` in eval mode and gradients off while it runs (the mode restored
// after): the probe forwards that size projectors on the first batch.
absl::StatusOr<c10::IValue> ProbeForward(
    Model& model, const std::function<absl::StatusOr<c10::IValue>()>& run);

absl::StatusOr<std::optional<PluginConfig>> InferProjector(const at::Tensor& student,
                                                           const at::Tensor& teacher,
                                                           const std::string& init);

// The output projectors `stage`'s HOLISTIC alignments with auto_projector and no
// output_projector need, by alignment name, from one forward of both models on `probe` (eval
// mode, no gradients, their modes restored; no random number drawn). Errors name the alignment.
absl::StatusOr<std::map<std::string, PluginConfig>> InferOutputProjectors(const StageConfig& stage,
                                                                          Model& teacher,
                                                                          Model& student,
                                                                          const Batch& probe);

// A BLOCKWISE stage's blocks: each alignment's student module (a sub-model sharing the
// student's parameters), projectors and loss, and the teacher's capture engine.
class Blockwise {
 public:
  // Built for `stage` (BLOCKWISE) over `teacher` and `student`; the projectors auto_projector
  // infers come from both models' forwards on `probe` (input projectors from the teacher
  // module's captured input against the student module's own, output projectors from the
  // outputs), in alignment order (input projector, then output projector), as silverspoon-kd
  // makes them in its first step. Errors name the alignment.
  static absl::StatusOr<std::unique_ptr<Blockwise>> Make(const StageConfig& stage, Model& teacher,
                                                         Model& student, const Batch& probe,
                                                         c10::Device device);
  ~Blockwise();

  // The projectors as auxiliary modules of the student ("student.<alignment>/input_projector",
  // ".../output_projector": checkpoints keep them), moved out (once).
  std::vector<AuxModule> TakeProjectors();
  // Each alignment's parameters (its student module's, then its projectors'): one optimizer
  // parameter group each, with `kwargs`.
  std::vector<ParamGroup> ParamGroups(const Kwargs& kwargs) const;

  // The teacher's forward on `samples` (no gradients, cut after the last aligned module), then
  // each block on its teacher module's inputs against its output: the sum of the alignments'
  // losses, and each as a term. With `backward` set, it runs after each block on its loss
  // (backward_per_block) and the sum is detached.
  absl::StatusOr<CriterionResult> Forward(const c10::IValue& samples,
                                          const std::function<void(const at::Tensor&)>& backward);

  // Clips each alignment's gradients to `max_norm` on their own (its projectors' too unless
  // clip_projectors is false), as silverspoon-kd clips each alignment's optimizer.
  void ClipGradNorm(double max_norm) const;

 private:
  struct Block;
  Blockwise() = default;
  std::vector<std::unique_ptr<Block>> blocks_;
  std::unique_ptr<ModuleCaptureEngine> engine_;
  std::vector<AuxModule> projectors_;
  bool clip_projectors_ = true;
};

}  // namespace boxes_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_INTERNAL_FEATURE_STAGE_H_
