// Helpers shared by libkd's fuzz targets (fuzz/README.md).
#ifndef LIBKD_FUZZ_FUZZ_UTIL_H_
#define LIBKD_FUZZ_FUZZ_UTIL_H_

#include <string>

#include "base/torch_archive.h"

namespace kd::fuzz {

// `bytes` with every stored record's CRC-32 rewritten to match its contents (in the central
// directory and the local header), so that mutations inside records get past the CRC check to
// the readers behind it. Unchanged when the zip structure does not parse.
inline std::string WithFixedCrcs(std::string bytes) {
  absl::StatusOr<TorchArchive> archive = InspectTorchArchive(bytes);
  if (!archive.ok()) return bytes;
  auto put32 = [&](uint64_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
  };
  for (const TorchArchive::Record& r : archive->records) {
    if (r.method != 0) continue;
    const uint32_t crc = Crc32(absl::string_view(bytes).substr(r.data_offset, r.size));
    put32(r.directory_entry_offset + 16, crc);
    put32(r.local_header_offset + 14, crc);
  }
  return bytes;
}

}  // namespace kd::fuzz

#endif  // LIBKD_FUZZ_FUZZ_UTIL_H_
