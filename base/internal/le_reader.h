// Bounds-checked little-endian reads over a file's bytes, shared by the zip reader
// (torch_archive.cc) and the pickle bounds check (pickle_bounds.cc).
#ifndef LIBKD_BASE_INTERNAL_LE_READER_H_
#define LIBKD_BASE_INTERNAL_LE_READER_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace kd {
namespace base_internal {

class Reader {
 public:
  explicit Reader(absl::string_view bytes) : bytes_(bytes) {}
  bool Has(uint64_t offset, uint64_t size) const {
    return offset <= bytes_.size() && size <= bytes_.size() - offset;
  }
  uint64_t Le(uint64_t offset, int width) const {  // caller checked Has(offset, width)
    uint64_t v = 0;
    for (int i = width - 1; i >= 0; --i) {
      v = (v << 8) | static_cast<unsigned char>(bytes_[offset + i]);
    }
    return v;
  }
  uint16_t U16(uint64_t o) const { return static_cast<uint16_t>(Le(o, 2)); }
  uint32_t U32(uint64_t o) const { return static_cast<uint32_t>(Le(o, 4)); }
  uint64_t U64(uint64_t o) const { return Le(o, 8); }
  absl::string_view Slice(uint64_t offset, uint64_t size) const {
    return bytes_.substr(offset, size);
  }
  uint64_t size() const { return bytes_.size(); }

 private:
  absl::string_view bytes_;
};

}  // namespace base_internal
}  // namespace kd

#endif  // LIBKD_BASE_INTERNAL_LE_READER_H_
