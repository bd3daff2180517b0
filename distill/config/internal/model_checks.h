// The config's models (DistillConfig.student, .teacher): a source each (TorchScript file,
// native registry key, or AOTInductor package for the teacher), the files they read, and what
// each source allows (optimize_for_inference for a TorchScript teacher; no checkpoints for a
// package; neither for the student). Validator internals.
#ifndef LIBKD_DISTILL_CONFIG_INTERNAL_MODEL_CHECKS_H_
#define LIBKD_DISTILL_CONFIG_INTERNAL_MODEL_CHECKS_H_

#include "distill/config/config_loader.h"
#include "distill/config/distill_config.pb.h"
#include "distill/config/internal/checker.h"

namespace kd {
namespace config_internal {

void CheckModels(const DistillConfig& config, const ConfigLocator& root, bool student_handed_in,
                 Checker& checker);

}  // namespace config_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_CONFIG_INTERNAL_MODEL_CHECKS_H_
