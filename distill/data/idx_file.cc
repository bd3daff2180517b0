#include "distill/data/idx_file.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "base/file_util.h"
#include "base/torch_status.h"

namespace kd {
namespace {

// IDX element types (the third byte of the magic number).
absl::string_view IdxTypeName(int type) {
  switch (type) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "short";
    case 0x0C:
      return "int";
    case 0x0D:
      return "float";
    case 0x0E:
      return "double";
    default:
      return "unknown";
  }
}

// Closes a gzFile on scope exit.
struct GzCloser {
  void operator()(gzFile file) const { gzclose(file); }
};
using GzFilePtr = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

// Reads up to `size` bytes into `out`; the count read, or -1 with `error` set on a gzip error.
int64_t ReadFully(gzFile file, uint8_t* out, int64_t size, std::string* error) {
  int64_t done = 0;
  while (done < size) {
    const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(size - done, 1 << 30));
    const int n = gzread(file, out + done, chunk);
    if (n < 0) {
      int code = Z_OK;
      const char* message = gzerror(file, &code);
      *error = message != nullptr ? message : "unknown gzip error";
      return -1;
    }
    if (n == 0) break;
    done += n;
  }
  // gzread reports a stream cut short (no gzip trailer) only through gzerror.
  int code = Z_OK;
  const char* message = gzerror(file, &code);
  if (code != Z_OK) {
    *error = message != nullptr ? message : "unknown gzip error";
    return -1;
  }
  return done;
}

}  // namespace

absl::StatusOr<at::Tensor> ReadIdxFile(const std::string& path) {
  // gzopen would block on a FIFO and read /dev/zero forever.
  if (absl::Status regular = CheckRegularFile(path); !regular.ok()) {
    if (regular.code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    return regular;
  }
  errno = 0;
  GzFilePtr file(gzopen(path.c_str(), "rb"));
  if (file == nullptr) {
    const int error = errno;
    if (error == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::UnavailableError(
        absl::StrCat(path, ": cannot open: ", error != 0 ? std::strerror(error) : "out of memory"));
  }
  gzbuffer(file.get(), 1 << 20);
  auto corrupt = [&path](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(path, ": ", what));
  };

  std::string gzip_error;
  auto bad_gzip = [&] {
    return corrupt(absl::StrCat("gzip data is corrupt or cut short: ", gzip_error));
  };
  uint8_t magic[4];
  const int64_t magic_read = ReadFully(file.get(), magic, 4, &gzip_error);
  if (magic_read < 0) return bad_gzip();
  if (magic_read < 4) {
    return corrupt(
        absl::StrCat("truncated: an IDX header needs 4 bytes, the file has ", magic_read));
  }
  const uint32_t magic_number = (uint32_t{magic[0]} << 24) | (uint32_t{magic[1]} << 16) |
                                (uint32_t{magic[2]} << 8) | uint32_t{magic[3]};
  if (magic[0] != 0 || magic[1] != 0) {
    return corrupt(absl::StrFormat(
        "not an IDX file: magic number 0x%08x (expected 0x0000TTNN: two zero bytes, the type, "
        "the number of dimensions)",
        magic_number));
  }
  if (magic[2] != 0x08) {
    return corrupt(
        absl::StrFormat("IDX element type 0x%02x (%s) is not supported; only unsigned byte (0x08)",
                        magic[2], IdxTypeName(magic[2])));
  }
  const int ndim = magic[3];
  if (ndim == 0) return corrupt("the IDX header gives 0 dimensions");

  std::vector<uint8_t> header(4 * ndim);
  const int64_t header_read = ReadFully(file.get(), header.data(), 4 * ndim, &gzip_error);
  if (header_read < 0) return bad_gzip();
  if (header_read < 4 * ndim) {
    return corrupt(absl::StrCat("truncated: the header of ", ndim, " dimensions needs ",
                                4 + 4 * ndim, " bytes, the file has ", 4 + header_read));
  }
  std::vector<int64_t> dims(ndim);
  int64_t numel = 1;
  constexpr int64_t kMaxElements = int64_t{1} << 40;
  for (int i = 0; i < ndim; ++i) {
    const uint8_t* d = &header[4 * i];
    dims[i] = (int64_t{d[0]} << 24) | (int64_t{d[1]} << 16) | (int64_t{d[2]} << 8) | d[3];
    // Checked before multiplying: two 32-bit dimensions overflow int64 (found by
    // //fuzz:idx_fuzzer).
    if (dims[i] != 0 && numel > kMaxElements / dims[i]) {
      return corrupt(absl::StrCat("the IDX header gives dimensions ",
                                  absl::StrJoin(dims.begin(), dims.begin() + i + 1, "x"),
                                  "..., more than 2^40 elements"));
    }
    numel *= dims[i];
  }

  // The header's size is what the file claims. The first 16 MiB are read before anything is
  // allocated, so that a small file claiming a terabyte fails on its length; past that, the
  // data go straight into the tensor, allocated once (reading into a growing buffer took twice
  // the data's size and a 37 MB gzip file claiming 8 GiB ended in bad_alloc). A claim this
  // process cannot allocate is refused by name.
  constexpr int64_t kFirst = int64_t{16} << 20;
  std::vector<uint8_t> first(static_cast<size_t>(std::min(kFirst, numel)));
  const int64_t first_read =
      ReadFully(file.get(), first.data(), static_cast<int64_t>(first.size()), &gzip_error);
  if (first_read < 0) return bad_gzip();
  auto truncated = [&](int64_t data_read) {
    return corrupt(absl::StrCat("truncated: the header gives dimensions ", absl::StrJoin(dims, "x"),
                                " (", numel, " bytes of data), the file has ", data_read));
  };
  if (first_read < static_cast<int64_t>(first.size())) return truncated(first_read);
  // libtorch has limits of its own (at most 64 dimensions): found by //fuzz:idx_fuzzer.
  absl::StatusOr<at::Tensor> made = CallTorch([&] { return at::empty(dims, at::kByte); });
  if (!made.ok()) {
    if (absl::StrContains(made.status().message(), "allocate")) {
      return absl::ResourceExhaustedError(
          absl::StrCat(path, ": the header gives dimensions ", absl::StrJoin(dims, "x"), " (",
                       HumanBytes(numel), " of data), more memory than this process can allocate"));
    }
    return corrupt(absl::StrCat("the header's dimensions ", absl::StrJoin(dims, "x"),
                                " make no tensor: ", made.status().message()));
  }
  at::Tensor data = *std::move(made);
  // An empty tensor's data pointer is null, which memcpy must not get even for 0 bytes (UBSan
  // found it, on a corpus file with a zero dimension).
  if (!first.empty()) {
    uint8_t* out = data.data_ptr<uint8_t>();
    std::memcpy(out, first.data(), first.size());
    const int64_t rest = numel - static_cast<int64_t>(first.size());
    const int64_t rest_read = ReadFully(file.get(), out + first.size(), rest, &gzip_error);
    if (rest_read < 0) return bad_gzip();
    if (rest_read < rest) return truncated(static_cast<int64_t>(first.size()) + rest_read);
  }
  uint8_t extra[1];
  const int64_t extra_read = ReadFully(file.get(), extra, 1, &gzip_error);
  if (extra_read < 0) return bad_gzip();
  if (extra_read > 0) {
    return corrupt(absl::StrCat("has more data than the header's dimensions ",
                                absl::StrJoin(dims, "x"), " (", numel, " bytes) describe"));
  }
  return data;
}

}  // namespace kd
