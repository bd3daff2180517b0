// Tensors in Hugging Face's safetensors format, one file or a model folder's shards: read with
// every header claim checked, written as Python's `safetensors` and `transformers` write them.
//
//   KD_ASSIGN_OR_RETURN(kd::SafetensorsContents file, kd::ReadSafetensors("w.safetensors"));
//   for (const auto& [name, tensor] : file.tensors) ...
//   KD_RETURN_IF_ERROR(kd::WriteSafetensors("out.safetensors", file.tensors, {{"format", "pt"}}));
//   KD_ASSIGN_OR_RETURN(kd::NamedTensors weights, kd::ReadHfWeights("gpt2_folder"));
//   KD_RETURN_IF_ERROR(kd::WriteHfWeights("student_folder", weights));
//
// The format: an 8-byte little-endian length N, N bytes of JSON {name: {"dtype", "shape",
// "data_offsets": [begin, end]}, "__metadata__": {string: string}}, then the data buffer, which
// the tensors cover without holes or overlaps (offsets relative to its start). Unlike a
// torch.save file it holds no code and no pickle: a header that lies is the only danger, so the
// reader checks every claim (dtype, shape, offsets against the buffer and against each other,
// names, metadata) before it makes a tensor.
//
// Errors name the file, the tensor and the fix, on one line: InvalidArgument for what is not a
// safetensors file or breaks the header's rules (not JSON, an unknown dtype, a negative dim, a
// name twice, metadata that is not text); DataLoss for a header that disagrees with the bytes
// (cut short, offsets past the buffer or overlapping, a byte count that is not the shape's,
// bytes no tensor covers); NotFound / PermissionDenied for files as base/file_util.h words them.
// Writes are atomic (base/file_util.h): a failed write leaves no partial file.
#ifndef LIBKD_BASE_SAFETENSORS_H_
#define LIBKD_BASE_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kd {

// Named tensors in order: a checkpoint's contents, a state dict to write.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// What one safetensors file holds.
struct SafetensorsContents {
  // In the order of their bytes in the file (which, for files written by `safetensors` or by
  // libkd, is the header's order): contiguous CPU tensors, each owning its memory.
  NamedTensors tensors;
  // The header's "__metadata__" (transformers writes {"format": "pt"}); empty if it has none.
  std::map<std::string, std::string> metadata;
};

// The most a header may claim: the reference implementation's limit (100,000,000 bytes).
inline constexpr int64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Reads the safetensors file at `path`. Errors are "path: reason" (see the banner).
absl::StatusOr<SafetensorsContents> ReadSafetensors(const std::string& path);

// The same, from the bytes of a file already in memory; errors are "name_for_errors: reason".
absl::StatusOr<SafetensorsContents> ParseSafetensors(absl::string_view bytes,
                                                     absl::string_view name_for_errors);

// Writes `tensors` (on any device, contiguous or not: written as contiguous CPU bytes) and
// `metadata` to `path`, byte for byte as Python's safetensors.torch.save_file writes them:
// tensors ordered by dtype alignment (8-byte first), then by name; the header padded with
// spaces to a multiple of 8. InvalidArgument naming the tensor for a name written twice or
// "__metadata__", an undefined or non-strided tensor, a dtype safetensors has no name for, or a
// name or metadata that is not UTF-8. Tensors that share memory are written twice.
absl::Status WriteSafetensors(const std::string& path, const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// The weights of a Hugging Face model folder: model.safetensors if there is one (transformers
// prefers it), else model.safetensors.index.json ("weight_map": name -> shard file) and its
// shards, shard by shard in file-name order, each in file order. A shard must lie inside the
// folder: its name neither absolute nor with a ".." component, and no symbolic link out of it,
// except the hub cache's own links from a snapshot folder (.../snapshots/<revision>/) into its
// repository's blobs/ folder. DataLoss when the index and the shards disagree (a name missing
// from its shard, or in a shard the index does not name, or in two shards); NotFound naming the
// folder when it holds neither file.
absl::StatusOr<NamedTensors> ReadHfWeights(const std::string& folder);

// Writes `tensors` into the existing `folder` as transformers' save_pretrained does: all in
// model.safetensors (metadata {"format": "pt"}), or, when max_shard_bytes > 0 and their bytes
// do not fit in one shard of that size, in model-00001-of-0000n.safetensors, ... (filled in
// order, a new shard whenever the next tensor would overflow this one, a larger tensor alone)
// with model.safetensors.index.json naming each tensor's shard. Weight files of an earlier save
// that the new set does not replace (model.safetensors, the index, shards of another count)
// are removed, so a reader never mixes the two. Every tensor is checked before a file is
// written; the files are not written atomically as a set: the shards first, the index last.
absl::Status WriteHfWeights(const std::string& folder, const NamedTensors& tensors,
                            int64_t max_shard_bytes = 0);

}  // namespace kd

#endif  // LIBKD_BASE_SAFETENSORS_H_
