// torch.save files that libtorch's unpickler cannot read, read as torch.load(weights_only=True)
// reads them: Python's collections.OrderedDict (what every model.state_dict() is, so every
// `torch.save(model.state_dict(), path)` and torchdistill's checkpoints, {'model': state_dict,
// 'optimizer': ..., 'lr_scheduler': ..., 'args': argparse.Namespace}) becomes a dict, where
// libtorch's unpickler turns it into None and fails on its items.
//
//   KD_ASSIGN_OR_RETURN(kd::TorchArchive archive, kd::VerifyTorchArchive(bytes));
//   KD_ASSIGN_OR_RETURN(c10::IValue value, kd::UnpicklePythonTorchSave(bytes, archive));
//
// What it builds: dicts (OrderedDict too; any hashable keys), lists, tuples, strings, bytes (as
// strings), ints, floats, bools, None and tensors (torch._utils._rebuild_tensor_v2,
// _rebuild_parameter, their storages read from the archive's records, each once). Objects of
// other classes (argparse.Namespace, a scheduler's lambdas) run no code: they become None, their
// state dropped, so a checkpoint's parts that are plain data read whole. Hostile input is an
// error, never a crash: lengths are checked by CheckPickleBounds first, memo indices, stack
// depth, storage keys, dtypes and each tensor's extent against its storage here.
#ifndef LIBKD_BASE_PYTHON_PICKLE_H_
#define LIBKD_BASE_PYTHON_PICKLE_H_

#include <ATen/core/ivalue.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/torch_archive.h"

namespace kd {

// The object `archive`'s data.pkl holds (`bytes`: the whole file `archive` was read from).
// InvalidArgument naming the opcode or object that cannot be read; phrased to follow the
// file's name.
absl::StatusOr<c10::IValue> UnpicklePythonTorchSave(absl::string_view bytes,
                                                    const TorchArchive& archive);

}  // namespace kd

#endif  // LIBKD_BASE_PYTHON_PICKLE_H_
