// Files in torch.save's format: written so that Python's torch.load reads them with its
// default weights_only=True (torch >= 2.6), read back with libtorch's unpickler.
//
//   c10::Dict<std::string, at::Tensor> state = ...;
//   KD_RETURN_IF_ERROR(kd::WriteTorchFile("state.pt", c10::IValue(state)));
//   KD_ASSIGN_OR_RETURN(c10::IValue back, kd::ReadTorchFile("state.pt"));
//   # Python: torch.load("state.pt")  -> {"fc.weight": tensor(...), ...}
//
// Why not torch::pickle_save: it tags every dict and list with its TorchScript type through
// torch.jit._pickle.restore_type_tag, a global that torch.load's weights_only unpickler refuses
// ("Unsupported global"), so since torch 2.6 Python cannot load those files without
// weights_only=False. libkd writes the same archive without the tags: plain dicts, lists,
// tuples, strings, numbers and tensors, all of which weights_only accepts.
//
// Errors: InvalidArgument naming the file for what cannot be read; writes are atomic (a
// temporary file renamed into place), so a failed write leaves an existing file as it was.
#ifndef LIBKD_BASE_TORCH_FILE_H_
#define LIBKD_BASE_TORCH_FILE_H_

#include <string>

#include <ATen/core/ivalue.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kd {

// `value` serialized as torch.save would write it (a zip archive: data.pkl and one record per
// tensor storage), without TorchScript type tags.
absl::StatusOr<std::string> EncodeTorchSave(const c10::IValue& value);

// Writes EncodeTorchSave(value) to `path` atomically.
absl::Status WriteTorchFile(const std::string& path, const c10::IValue& value);

// Decodes bytes written by torch.save (Python) or EncodeTorchSave. InvalidArgument with
// libtorch's reason (without its backtrace) when they cannot be read; callers name the file.
absl::StatusOr<c10::IValue> DecodeTorchSave(const std::string& bytes);

// Reads and decodes the torch.save file at `path`; errors name it.
absl::StatusOr<c10::IValue> ReadTorchFile(const std::string& path);

}  // namespace kd

#endif  // LIBKD_BASE_TORCH_FILE_H_
