#include "distill/procs/forward_procs.h"

#include <string>
#include <vector>

#include <ATen/core/Dict.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kd {

absl::StatusOr<c10::IValue> ForwardAll(Model& model, const Batch& batch, const Kwargs& kwargs) {
  return model.Forward({batch.samples, batch.targets, batch.supp}, kwargs);
}

absl::StatusOr<c10::IValue> ForwardBatchOnly(Model& model, const Batch& batch, const Kwargs&) {
  return model.Forward({batch.samples});
}

absl::StatusOr<c10::IValue> ForwardBatchOnlyAsKwargs(Model& model, const Batch& batch,
                                                     const Kwargs&) {
  const c10::IValue& samples = batch.samples;
  if (!samples.isGenericDict() ||
      !samples.toGenericDict().keyType()->isSubtypeOf(*c10::StringType::get())) {
    return absl::InvalidArgumentError(
        absl::StrCat("forward_batch_only_as_kwargs passes the samples as keyword arguments, so "
                     "they must be a dict with string keys; got ",
                     samples.isGenericDict() ? samples.type()->str() : samples.tagKind()));
  }
  Kwargs as_kwargs;
  for (const auto& entry : samples.toGenericDict()) {
    as_kwargs.emplace(entry.key().toStringRef(), entry.value());
  }
  return model.Forward({}, as_kwargs);
}

absl::StatusOr<c10::IValue> ForwardBatchTarget(Model& model, const Batch& batch, const Kwargs&) {
  return model.Forward({batch.samples, batch.targets});
}

absl::StatusOr<c10::IValue> ForwardBatchSuppDict(Model& model, const Batch& batch, const Kwargs&) {
  return model.Forward({batch.samples, batch.supp});
}

absl::StatusOr<c10::IValue> ForwardBatch4Sskd(Model& model, const Batch& batch, const Kwargs&) {
  if (!batch.samples.isTensor() || batch.samples.toTensor().dim() < 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "forward_batch4sskd needs samples that are a tensor [..., C, H, W]; got ",
        batch.samples.isTensor() ? absl::StrCat("a ", batch.samples.toTensor().dim(), "-d tensor")
                                 : std::string(batch.samples.tagKind())));
  }
  const at::Tensor& samples = batch.samples.toTensor();
  const int64_t d = samples.dim();
  return model.Forward(
      {samples.view({-1, samples.size(d - 3), samples.size(d - 2), samples.size(d - 1)})});
}

// The model not run: the samples stand for its output, as torchdistill's EmptyModule wrapper
// (which replaces a model with an identity) gives them, for the stages that need only the other
// model (SSKD's first stage trains the teacher's module alone).
absl::StatusOr<c10::IValue> ForwardIdentity(Model&, const Batch& batch, const Kwargs&) {
  return batch.samples;
}

// Only forward_all passes kwargs on, so it accepts any (kAnyKwargs); the others take
// none, and a config that gives them some is told so.
KD_REGISTER_PROC_FUNC(ForwardProc, "forward_all", ForwardAll, kAnyKwargs);
KD_REGISTER_PROC_FUNC(ForwardProc, "forward_batch_only", ForwardBatchOnly, {});
KD_REGISTER_PROC_FUNC(ForwardProc, "forward_batch_only_as_kwargs", ForwardBatchOnlyAsKwargs, {});
KD_REGISTER_PROC_FUNC(ForwardProc, "forward_batch_target", ForwardBatchTarget, {});
KD_REGISTER_PROC_FUNC(ForwardProc, "forward_batch_supp_dict", ForwardBatchSuppDict, {});
KD_REGISTER_PROC_FUNC(ForwardProc, "forward_batch4sskd", ForwardBatch4Sskd, {});
KD_REGISTER_PROC_FUNC(ForwardProc, "identity", ForwardIdentity, {});

}  // namespace kd
