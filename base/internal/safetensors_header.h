// The JSON header of a safetensors file (base/safetensors.h): parsed and checked against the
// data buffer it describes before any tensor is made, and written as the reference writer
// (the Rust core of Python's `safetensors`) writes it.
#ifndef LIBKD_BASE_INTERNAL_SAFETENSORS_HEADER_H_
#define LIBKD_BASE_INTERNAL_SAFETENSORS_HEADER_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kd {
namespace base_internal {

// A safetensors dtype libkd reads and writes.
struct SafetensorsDtype {
  const char* name;  // "F32"
  c10::ScalarType type;
  int itemsize;
  // Place in the reference writer's order (its Rust enum `Dtype`, which ranks by alignment):
  // tensors of higher rank are written first.
  int rank;
};

// The dtype safetensors calls `name` / libtorch calls `type`; nullptr if there is none.
const SafetensorsDtype* FindSafetensorsDtype(absl::string_view name);
const SafetensorsDtype* FindSafetensorsDtype(c10::ScalarType type);
// "BOOL, U8, ..., U64": for messages that list what is known.
std::string KnownSafetensorsDtypes();

// One tensor as the header describes it, checked.
struct SafetensorsEntry {
  std::string name;
  const SafetensorsDtype* dtype;
  std::vector<int64_t> shape;
  int64_t begin;  // its bytes in the data buffer: [begin, end)
  int64_t end;
};

struct SafetensorsLayout {
  std::vector<SafetensorsEntry> tensors;  // by position in the data buffer
  std::map<std::string, std::string> metadata;
};

// Parses `header` (the N bytes after the length) and checks it against a data buffer of
// `buffer_bytes`: a JSON object, each name once, known dtypes, shapes of non-negative integers
// whose bytes fit in int64, offsets two integers begin <= end within the buffer holding exactly
// the shape's bytes, no overlaps and no bytes that no tensor covers, metadata of strings.
// Errors as base/safetensors.h words them, without the file's name.
absl::StatusOr<SafetensorsLayout> ParseSafetensorsHeader(absl::string_view header,
                                                         int64_t buffer_bytes);

// The dtype of each of `tensors` (in their order) if safetensors can hold them: names given
// once, none "__metadata__", tensors defined and strided, dtypes with a safetensors name.
// InvalidArgument naming the tensor and the fix otherwise.
absl::StatusOr<std::vector<const SafetensorsDtype*>> CheckTensorsToWrite(
    const std::vector<std::pair<std::string, at::Tensor>>& tensors);

// `text` as a JSON string (quoted, escaped as serde_json escapes); InvalidArgument if it is not
// UTF-8, the message beginning with `what` ("tensor name \"w\"").
absl::StatusOr<std::string> JsonString(absl::string_view text, absl::string_view what);

// `name` quoted for a one-line message, its control bytes escaped.
std::string QuoteName(absl::string_view name);

// "[2, 3]".
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace base_internal
}  // namespace kd

#endif  // LIBKD_BASE_INTERNAL_SAFETENSORS_HEADER_H_
