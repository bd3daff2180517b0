// torchdistill's forward processes: how a batch is fed to a model. Each is registered in the
// forward-process registry under its name (link //distill/procs:forward_procs or
// //distill/procs:all_proc_funcs) and declared here for direct calls.
//
//   key                            calls
//   forward_all                    model(samples, targets, supp, **kwargs)
//   forward_batch_only             model(samples)                  (the default)
//   forward_batch_only_as_kwargs   model(**samples)                samples: dict, string keys
//   forward_batch_target           model(samples, targets)
//   forward_batch_supp_dict        model(samples, supp)
//   forward_batch4sskd             model(samples.view(-1, C, H, W))  samples: [..., C, H, W]
//
//   kd::Batch batch{x, y, c10::IValue()};
//   KD_ASSIGN_OR_RETURN(c10::IValue out, kd::ForwardBatchOnly(*model, batch, {}));
//
// As in torchdistill, only forward_all passes kwargs on to the model; the others take none.
// The samples, targets and supp are passed as they are (a tuple stays one argument). Batches
// of the wrong shape give InvalidArgument; the model's own errors throw c10::Error (a
// ProcFunc turns them into a status).
#ifndef LIBKD_DISTILL_PROCS_FORWARD_PROCS_H_
#define LIBKD_DISTILL_PROCS_FORWARD_PROCS_H_

#include <ATen/core/ivalue.h>

#include "absl/status/statusor.h"
#include "distill/procs/proc_func.h"
#include "hooks/model.h"

namespace kd {

absl::StatusOr<c10::IValue> ForwardAll(Model& model, const Batch& batch, const Kwargs& kwargs);
absl::StatusOr<c10::IValue> ForwardBatchOnly(Model& model, const Batch& batch,
                                             const Kwargs& kwargs);
absl::StatusOr<c10::IValue> ForwardBatchOnlyAsKwargs(Model& model, const Batch& batch,
                                                     const Kwargs& kwargs);
absl::StatusOr<c10::IValue> ForwardBatchTarget(Model& model, const Batch& batch,
                                               const Kwargs& kwargs);
absl::StatusOr<c10::IValue> ForwardBatchSuppDict(Model& model, const Batch& batch,
                                                 const Kwargs& kwargs);
absl::StatusOr<c10::IValue> ForwardBatch4Sskd(Model& model, const Batch& batch,
                                              const Kwargs& kwargs);

}  // namespace kd

#endif  // LIBKD_DISTILL_PROCS_FORWARD_PROCS_H_
