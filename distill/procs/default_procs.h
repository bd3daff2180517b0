// torchdistill's default pre/post epoch and pre/post forward processes, acting on a box
// through kd::TrainingContext. Each is registered under torchdistill's name (link
// //distill/procs:default_procs or //distill/procs:all_proc_funcs) and declared here for direct calls.
//
//   default_pre_epoch_process_with_teacher     clear both I/O dicts, teacher eval, student
//                                              train, distributed: sampler epoch
//   default_pre_epoch_process_without_teacher  clear the student's I/O dict, student train,
//                                              distributed: sampler epoch
//   default_pre_forward_process                nothing
//   default_post_forward_process               count the batch; backward of loss /
//                                              grad_accum_step; every grad_accum_step batches:
//                                              clip, optimizer step, zero grad; step-wise
//                                              scheduler every scheduling_step batches (at
//                                              optimizer steps)
//   default_post_epoch_process_with_teacher    epoch-wise scheduler step, auxiliary modules'
//                                              post-epoch (both models), distributed: barrier
//   default_post_epoch_process_without_teacher the same for the student alone
#ifndef LIBKD_DISTILL_PROCS_DEFAULT_PROCS_H_
#define LIBKD_DISTILL_PROCS_DEFAULT_PROCS_H_

#include <cstdint>
#include <optional>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "distill/procs/proc_func.h"
#include "distill/procs/training_context.h"

namespace kd {

absl::Status DefaultPreEpochProcessWithTeacher(TrainingContext& box, int64_t epoch,
                                               const Kwargs& kwargs);
absl::Status DefaultPreEpochProcessWithoutTeacher(TrainingContext& box, int64_t epoch,
                                                  const Kwargs& kwargs);
absl::Status DefaultPreForwardProcess(TrainingContext& box, Batch& batch, const Kwargs& kwargs);
absl::Status DefaultPostForwardProcess(TrainingContext& box, const at::Tensor& loss,
                                       std::optional<double> metric, const Kwargs& kwargs);
absl::Status DefaultPostEpochProcessWithTeacher(TrainingContext& box, std::optional<double> metric,
                                                const Kwargs& kwargs);
absl::Status DefaultPostEpochProcessWithoutTeacher(TrainingContext& box,
                                                   std::optional<double> metric,
                                                   const Kwargs& kwargs);

}  // namespace kd

#endif  // LIBKD_DISTILL_PROCS_DEFAULT_PROCS_H_
