// For base/python_pickle.cc's machine: the operands of its opcodes, and what the callables of a
// torch.save pickle build: tensors
// from the archive's storage records (each read once, each tensor checked against its storage),
// dicts from collections.OrderedDict, bytes from _codecs.encode. Nothing is imported or called:
// a callable of another name makes None.
#ifndef LIBKD_BASE_INTERNAL_PYTHON_PICKLE_OBJECTS_H_
#define LIBKD_BASE_INTERNAL_PYTHON_PICKLE_OBJECTS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/internal/le_reader.h"
#include "base/torch_archive.h"

namespace kd {
namespace base_internal {

// The operands of a pickle's opcodes, read in order with bounds checked (errors say what ran
// past the pickle).
class Operands {
 public:
  explicit Operands(absl::string_view pickle) : reader_(pickle) {}
  bool done() const { return pos_ >= reader_.size(); }
  size_t pos() const { return pos_; }
  absl::StatusOr<absl::string_view> Take(uint64_t n);
  // `n` (<= 8) bytes, little-endian.
  absl::StatusOr<uint64_t> Unsigned(int n);
  // LONG1/LONG4's `n`-byte two's-complement integer; more than 8 bytes is refused.
  absl::StatusOr<int64_t> Long(uint64_t n);
  // GLOBAL's "module\n" and "name\n" (at most 256 bytes each).
  absl::StatusOr<std::string> Line();

 private:
  base_internal::Reader reader_;
  size_t pos_ = 0;
};

// `f`(*`args`), `f` a GLOBAL's "module.name": torch._utils._rebuild_tensor_v2 (and
// _rebuild_tensor), _rebuild_parameter(_with_state), collections.OrderedDict, _codecs.encode;
// None for any other. InvalidArgument naming what does not fit.
absl::StatusOr<c10::IValue> CallGlobal(const std::string& f, const std::vector<c10::IValue>& args);

// The storages of one archive (`bytes`: the whole file), by their persistent ids.
class StorageReader {
 public:
  StorageReader(absl::string_view bytes, const TorchArchive& archive)
      : bytes_(bytes), archive_(archive) {}

  // The persistent id's elements, ('storage', "<global torch.FloatStorage>", key, location,
  // numel) (a copy: indexing a tuple's inline storage past 3 trips gcc's -Warray-bounds at -O2):
  // the record data/<key> as a 1-D tensor, read once per key.
  absl::StatusOr<at::Tensor> Read(const std::vector<c10::IValue>& id);

 private:
  absl::string_view bytes_;
  const TorchArchive& archive_;
  std::map<std::string, at::Tensor> storages_;
};

}  // namespace base_internal
}  // namespace kd

#endif  // LIBKD_BASE_INTERNAL_PYTHON_PICKLE_OBJECTS_H_
