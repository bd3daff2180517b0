// The loop box_benchmark times against Run(): torchdistill's loop over a box's step API (box.h),
// PreEpoch to PostEpoch over the run's epochs. Exits the process naming the error if a call fails.
#ifndef LIBKD_DISTILL_BOXES_INTERNAL_STEP_API_LOOP_H_
#define LIBKD_DISTILL_BOXES_INTERNAL_STEP_API_LOOP_H_

#include "distill/config/distill_config.pb.h"

namespace kd {

// One hand-driven run of `config` (its folder /tmp/libkd_box_benchmark_steps, replaced); its
// seconds from the first PreEpoch to the last PostEpoch, as Run()'s epochs count theirs.
double StepApiRun(const DistillConfig& config);

}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_INTERNAL_STEP_API_LOOP_H_
