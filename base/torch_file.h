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
#include "absl/strings/string_view.h"
#include "base/torch_archive.h"

namespace kd {

// `value` serialized as torch.save would write it (a zip archive: data.pkl and one record per
// tensor storage), without TorchScript type tags.
absl::StatusOr<std::string> EncodeTorchSave(const c10::IValue& value);

// Writes EncodeTorchSave(value) to `path` atomically.
absl::Status WriteTorchFile(const std::string& path, const c10::IValue& value);

// The archive checks of a file that should be of kind `expected` (kTorchScript or kTorchSave):
// VerifyTorchArchive (structure, every CRC-32), then the kind (a torch.save file given as a
// model and the reverse, a zip torch did not write) and a file format version this libtorch
// reads. Messages are phrased to follow the file's name.
absl::StatusOr<TorchArchive> CheckTorchArchive(absl::string_view bytes,
                                               TorchArchive::Kind expected);

// What every torch.save reader checks before unpickling (base/torch_archive.h): a zip archive
// torch.save wrote (not TorchScript, not the legacy format, not cut short), every record's
// CRC-32 (DataLoss naming the bad record), a file format version this libtorch reads, and its
// pickle's lengths in bounds. Messages are phrased to follow the file's name: "m.pt: " + message.
absl::Status CheckTorchSaveArchive(absl::string_view bytes);

// Decodes bytes written by torch.save (Python) or EncodeTorchSave, after
// CheckTorchSaveArchive: with libtorch's unpickler, or where it cannot (Python's OrderedDict,
// what every state_dict() is; objects of other classes, torchdistill's checkpoints' Namespace)
// with libkd's reader of Python's pickles (base/python_pickle.h). InvalidArgument / DataLoss with the reason (libtorch's without its
// backtrace), phrased to follow the file's name, which callers add.
absl::StatusOr<c10::IValue> DecodeTorchSave(const std::string& bytes);

// Reads and decodes the torch.save file at `path`; errors are "path: reason".
absl::StatusOr<c10::IValue> ReadTorchFile(const std::string& path);

}  // namespace kd

#endif  // LIBKD_BASE_TORCH_FILE_H_
