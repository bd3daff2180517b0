// The libkd checkpoint (runs/<name>/checkpoints/last.pt, best.pt, epoch_N.pt): a torch.save
// dict that Python's torch.load reads, checked key by key before a box resumes from it.
//
//   KD_ASSIGN_OR_RETURN(c10::impl::GenericDict saved, kd::ReadCheckpoint(path));
//   saved.at("epoch").toInt();   // present and an int: ReadCheckpoint checked it
//
// What it holds (format "libkd-checkpoint-1"): stage, epoch (ints >= 0), stage_name, best
// (a number, NaN before the first validation), student and teacher (parameter path -> tensor),
// rng (the CPU generator's uint8 state), and the stage's optimizer (its serialized archive as
// uint8), scheduler and grad_scaler (lists of numbers), grad_count, loss_state and
// auxiliary_modules (name -> tensor), fresh_stage (a stage's end: the next stage starts
// afresh, without these).
#ifndef LIBKD_DISTILL_BOXES_CHECKPOINT_H_
#define LIBKD_DISTILL_BOXES_CHECKPOINT_H_

#include <string>

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "distill/config/distill_config.pb.h"
#include "hooks/model.h"

namespace kd {

inline constexpr char kCheckpointFormat[] = "libkd-checkpoint-1";

// Whether `value` is a libkd checkpoint: every key above present (or absent where optional)
// with its type. InvalidArgument naming the first key that is not, phrased to follow the
// file's name.
absl::Status CheckCheckpoint(const c10::IValue& value);

// The checkpoint at `path`: read (regular file, CRC-32s verified), unpickled and checked.
// Errors are "path: reason".
absl::StatusOr<c10::impl::GenericDict> ReadCheckpoint(const std::string& path);

// The tensors of `model` (parameters, then buffers) as a dict path -> tensor (detached, on the
// CPU), as checkpoints hold the models.
c10::impl::GenericDict StateDict(const Model& model);

// Copies a checkpoint's dict of `model`'s tensors into it. InvalidArgument naming `what` (the
// file) for a missing tensor, another shape, or NaN or infinite values.
absl::Status LoadStateDict(Model& model, const c10::IValue& value, absl::string_view what);

// Writes checkpoint `value` (atomically) where `config` says, under `dir`: "last.pt" (unless
// save_last is false), "best.pt" when `improved` (unless save_best is false), "<stage>.pt" when
// the stage is done, "<stage>_epoch<N>.pt" every config.every_n_epochs epochs.
absl::Status WriteCheckpointFiles(const c10::IValue& value, const std::string& dir,
                                  const CheckpointConfig& config, const std::string& stage,
                                  int64_t epochs_done, bool improved, bool stage_done);

}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_CHECKPOINT_H_
