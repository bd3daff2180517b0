// Internal to distill/boxes: what a stage's feature_distillation (silverspoon-kd's holistic and
// blockwise distillers) needs beyond an ordinary stage: the projectors auto_projector infers
// from the shapes of a probe batch, and the blockwise step on the capture engine.
#ifndef LIBKD_DISTILL_BOXES_INTERNAL_FEATURE_STAGE_H_
#define LIBKD_DISTILL_BOXES_INTERNAL_FEATURE_STAGE_H_

#include <map>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "distill/config/distill_config.pb.h"
#include "distill/data/batch.h"
#include "hooks/model.h"

namespace kd {
namespace boxes_internal {

// silverspoon-kd's Alignment._try_infer_output_projector on the student's and the teacher's
// values: none for equal shapes; GenericConv2dProjector (no bias) for 4-d values whose
// channels alone differ; GenericLinearProjector (bias; `init` its initialization) for values
// whose last dimension alone differs. InvalidArgument naming both shapes otherwise.
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

}  // namespace boxes_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_INTERNAL_FEATURE_STAGE_H_
