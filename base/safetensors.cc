// Reading and writing one safetensors file; the header's rules are in
// internal/safetensors_header.cc, a model folder's shards in hf_weights.cc.
#include "base/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <numeric>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file_util.h"
#include "base/internal/safetensors_header.h"
#include "base/status_macros.h"
#include "base/torch_status.h"

namespace kd {
namespace {

using base_internal::FindSafetensorsDtype;
using base_internal::QuoteName;
using base_internal::SafetensorsDtype;
using base_internal::SafetensorsEntry;
using base_internal::SafetensorsLayout;

// safetensors is little-endian; tensors are read and written as the bytes in memory.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little-endian");

// The file whose bytes `read_at(offset, size, out)` copies into `out` (an absl::Status),
// `file_bytes` long, checked whole before any tensor is made. Each tensor is then allocated by
// libtorch and its bytes copied in, rather than the file mapped and the tensors made over the
// mapping with at::from_blob: a tensor owns its memory (a mapping would live as long as the last of
// its tensors), a file cut or rewritten under the reader is a DataLoss here, not a SIGBUS at a
// later access, the tensors are aligned whatever the file's offsets, and memdiag's tracking
// allocator sees them. The price is one copy from the page cache, which a model's load pays once.
template <typename ReadAt>
absl::StatusOr<SafetensorsContents> Decode(int64_t file_bytes, const ReadAt& read_at) {
  if (file_bytes < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("is ", file_bytes,
                     " bytes, too few for a safetensors file (whose first 8 bytes give the length "
                     "of its JSON header)"));
  }
  unsigned char length[8];
  KD_RETURN_IF_ERROR(read_at(0, 8, reinterpret_cast<char*>(length)));
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | length[i];
  if (header_bytes > static_cast<uint64_t>(kMaxSafetensorsHeaderBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("its first 8 bytes give a header of ", header_bytes, " bytes, more than the ",
                     kMaxSafetensorsHeaderBytes, " safetensors allows: not a safetensors file"));
  }
  if (header_bytes > static_cast<uint64_t>(file_bytes - 8)) {
    return absl::DataLossError(absl::StrCat(
        "its first 8 bytes give a header of ", header_bytes, " bytes, but only ", file_bytes - 8,
        " follow: the file is cut short (or not a safetensors file); download or save it again"));
  }
  std::string header(header_bytes, '\0');
  KD_RETURN_IF_ERROR(read_at(8, static_cast<int64_t>(header_bytes), header.data()));
  const int64_t data_start = 8 + static_cast<int64_t>(header_bytes);
  KD_ASSIGN_OR_RETURN(SafetensorsLayout layout,
                      base_internal::ParseSafetensorsHeader(header, file_bytes - data_start));
  SafetensorsContents contents;
  contents.metadata = std::move(layout.metadata);
  for (SafetensorsEntry& entry : layout.tensors) {
    const std::string context = absl::StrCat("tensor ", QuoteName(entry.name));
    const int64_t bytes = entry.end - entry.begin;
    KD_ASSIGN_OR_RETURN(
        at::Tensor tensor,
        CallTorch(absl::StrCat(context, ": cannot allocate ", HumanBytes(bytes)),
                  absl::StatusCode::kResourceExhausted, [&] {
                    return at::empty(entry.shape,
                                     at::TensorOptions().dtype(entry.dtype->type).device(at::kCPU));
                  }));
    char* data = static_cast<char*>(tensor.data_ptr());  // null when there are no elements
    if (bytes > 0) KD_RETURN_IF_ERROR(read_at(data_start + entry.begin, bytes, data));
    if (entry.dtype->type == at::kBool) {
      // Any byte but 0 and 1 makes a bool tensor whose operations libtorch leaves undefined.
      const auto bad = std::find_if(data, data + bytes, [](char b) { return b != 0 && b != 1; });
      if (bad != data + bytes) {
        return absl::DataLossError(
            absl::StrCat(context, ": BOOL element ", bad - data, " is byte ",
                         static_cast<int>(static_cast<unsigned char>(*bad)),
                         ", not 0 or 1; the file is damaged: download or save it again"));
      }
    }
    contents.tensors.emplace_back(std::move(entry.name), std::move(tensor));
  }
  return contents;
}

// A tensor to write: its place in the caller's list, its dtype, its contiguous CPU bytes.
struct TensorToWrite {
  size_t index;
  const SafetensorsDtype* dtype;
  at::Tensor data;
};

}  // namespace

absl::StatusOr<SafetensorsContents> ReadSafetensors(const std::string& path) {
  KD_RETURN_IF_ERROR(CheckRegularFile(path));
  // O_NONBLOCK: a FIFO put in the file's place since the check must not block the open.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    const std::string message = absl::StrCat(path, ": cannot open: ", std::strerror(err));
    if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
    if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(message);
    return absl::UnavailableError(message);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat(path, ": changed while it was opened; try again"));
  }
  const auto read_at = [&](int64_t offset, int64_t size, char* out) -> absl::Status {
    while (size > 0) {
      const ssize_t n = ::pread(fd, out, static_cast<size_t>(size), offset);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return absl::UnavailableError(absl::StrCat("cannot read: ", std::strerror(errno)));
      if (n == 0) {
        return absl::DataLossError(absl::StrCat(
            "ended at byte ", offset, " while read, shorter than its ", st.st_size,
            " bytes when opened: it changed under the reader; read it again once written"));
      }
      out += n;
      offset += n;
      size -= n;
    }
    return absl::OkStatus();
  };
  absl::StatusOr<SafetensorsContents> contents = Decode(st.st_size, read_at);
  ::close(fd);
  return WithContext(path, std::move(contents));
}

absl::StatusOr<SafetensorsContents> ParseSafetensors(absl::string_view bytes,
                                                     absl::string_view name_for_errors) {
  const auto read_at = [&](int64_t offset, int64_t size, char* out) {
    std::memcpy(out, bytes.data() + offset, static_cast<size_t>(size));  // Decode checked bounds
    return absl::OkStatus();
  };
  return WithContext(name_for_errors, Decode(static_cast<int64_t>(bytes.size()), read_at));
}

absl::Status WriteSafetensors(const std::string& path, const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata) {
  KD_ASSIGN_OR_RETURN(std::vector<const SafetensorsDtype*> dtypes,
                      WithContext(path, base_internal::CheckTensorsToWrite(tensors)));
  std::vector<TensorToWrite> to_write;
  for (size_t i = 0; i < tensors.size(); ++i) to_write.push_back({i, dtypes[i], at::Tensor()});
  // The reference writer's order: higher-ranked (more aligned) dtypes first, then by name.
  std::sort(to_write.begin(), to_write.end(), [&](const TensorToWrite& a, const TensorToWrite& b) {
    if (a.dtype->rank != b.dtype->rank) return a.dtype->rank > b.dtype->rank;
    return tensors[a.index].first < tensors[b.index].first;
  });
  std::string json = "{";
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    for (const auto& [key, value] : metadata) {
      KD_ASSIGN_OR_RETURN(std::string k,
                          base_internal::JsonString(key, absl::StrCat(path, ": metadata key")));
      KD_ASSIGN_OR_RETURN(std::string v,
                          base_internal::JsonString(value, absl::StrCat(path, ": metadata ", k)));
      absl::StrAppend(&json, json.back() == '{' ? "" : ",", k, ":", v);
    }
    json += "}";
  }
  int64_t offset = 0;
  for (TensorToWrite& t : to_write) {
    // Not a structured binding: clang does not let the lambda below capture one.
    const std::string& name = tensors[t.index].first;
    const at::Tensor& tensor = tensors[t.index].second;
    const std::string context = absl::StrCat(path, ": tensor ", QuoteName(name));
    KD_ASSIGN_OR_RETURN(std::string key, base_internal::JsonString(name, context));
    KD_ASSIGN_OR_RETURN(
        t.data,
        CallTorch(absl::StrCat(context, ": cannot copy it to the CPU"),
                  absl::StatusCode::kInvalidArgument, [&] {
                    return tensor.detach().to(at::kCPU).resolve_conj().resolve_neg().contiguous();
                  }));
    const int64_t end = offset + static_cast<int64_t>(t.data.nbytes());
    absl::StrAppend(&json, json.size() > 1 ? "," : "", key, ":{\"dtype\":\"", t.dtype->name,
                    "\",\"shape\":[", absl::StrJoin(t.data.sizes(), ","), "],\"data_offsets\":[",
                    offset, ",", end, "]}");
    offset = end;
  }
  json += "}";
  json.append((8 - json.size() % 8) % 8, ' ');  // as the reference writer pads
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  head += json;
  std::vector<absl::string_view> parts = {head};
  for (const TensorToWrite& t : to_write) {
    parts.emplace_back(static_cast<const char*>(t.data.const_data_ptr()), t.data.nbytes());
  }
  return WriteFileAtomicallyFromParts(path, parts);
}

}  // namespace kd
