// A process function registered from outside distill/, the way a user extends libkd: the
// pre-forward process "scale_samples" multiplies the batch's samples by its `factor` kwarg.
//
//   pre_forward_proc { key: "scale_samples" kwargs { name: "factor" number: 0.5 } }
//
// Link //tests/custom_proc:scale_samples (alwayslink) and the key is known.
#ifndef LIBKD_TESTS_CUSTOM_PROC_SCALE_SAMPLES_H_
#define LIBKD_TESTS_CUSTOM_PROC_SCALE_SAMPLES_H_

#include "absl/status/status.h"
#include "distill/procs/proc_func.h"

namespace kd {
namespace test {

// samples *= kwargs["factor"] (default 1). InvalidArgument unless the samples are a tensor.
absl::Status ScaleSamples(TrainingContext& box, Batch& batch, const Kwargs& kwargs);

}  // namespace test
}  // namespace kd

#endif  // LIBKD_TESTS_CUSTOM_PROC_SCALE_SAMPLES_H_
