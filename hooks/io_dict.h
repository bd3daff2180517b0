// The I/O dict: what forward hooks record, by module path and "input"/"output".
//
//   IoDict io = *manager.PopIoDict();
//   KD_ASSIGN_OR_RETURN(c10::IValue feats, GetIo(io, "layer2", "output"));
//
// Values follow torchdistill: a module's positional input with a single argument unwrapped, its
// output (a one-element tuple unwrapped), a list of those in call order with `accumulates`, or
// one stacked tensor with `stacks_accumulated`.
#ifndef LIBKD_HOOKS_IO_DICT_H_
#define LIBKD_HOOKS_IO_DICT_H_

#include <map>
#include <string>

#include <ATen/core/ivalue.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kd {

// io[path]["input" | "output"] -> value.
using IoDict = std::map<std::string, std::map<std::string, c10::IValue>>;

inline constexpr char kInput[] = "input";
inline constexpr char kOutput[] = "output";

// io[path][io_type], or NotFound naming what is missing and the nearest recorded paths.
absl::StatusOr<c10::IValue> GetIo(const IoDict& io, absl::string_view path,
                                  absl::string_view io_type);

// The dict as an IValue (Dict[str, Dict[str, Any]]): kd::WriteTorchFile writes it so that
// Python's torch.load returns {path: {"input": ..., "output": ...}}.
c10::IValue IoDictToIValue(const IoDict& io);

}  // namespace kd

#endif  // LIBKD_HOOKS_IO_DICT_H_
