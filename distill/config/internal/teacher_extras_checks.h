// The validator's checks of a stage's teacher_cache and overlap_teacher (config_validator.cc):
// their numbers in range, and mode ON refused where the config shows the cache or the overlap
// would not give the run without them (distill/config/teacher_extras.h says why).
#ifndef LIBKD_DISTILL_CONFIG_INTERNAL_TEACHER_EXTRAS_CHECKS_H_
#define LIBKD_DISTILL_CONFIG_INTERNAL_TEACHER_EXTRAS_CHECKS_H_

#include "distill/config/config_loader.h"
#include "distill/config/distill_config.pb.h"
#include "distill/config/internal/checker.h"

namespace kd {
namespace config_internal {

// `stage` (at `loc`) of `config`; `has_teacher`: the config's teacher or one handed to MakeBox.
void CheckTeacherExtras(const DistillConfig& config, const StageConfig& stage,
                        const ConfigLocator& loc, bool has_teacher, Checker& checker);

}  // namespace config_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_CONFIG_INTERNAL_TEACHER_EXTRAS_CHECKS_H_
