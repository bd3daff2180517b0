// A pre-forward process function registered from another repository, by key.
#include "distill/procs/proc_func.h"

namespace consumer {

absl::Status HalveSamples(kd::TrainingContext&, kd::Batch& batch, const kd::Kwargs&) {
  if (batch.samples.isTensor()) batch.samples = batch.samples.toTensor().mul(0.5);
  return absl::OkStatus();
}

KD_REGISTER_PROC_FUNC(kd::PreForwardProc, "consumer_halve_samples", HalveSamples, {});

}  // namespace consumer
