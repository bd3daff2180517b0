// CRC-32C (Castagnoli), the checksum of TensorBoard's record format, and its masked form.
// Written here: Debian 12's abseil (20220623) predates absl/crc, and zlib's crc32 is the IEEE
// polynomial, not Castagnoli's.
#ifndef LIBKD_TENSORBOARD_CRC32C_H_
#define LIBKD_TENSORBOARD_CRC32C_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace kd {
namespace tensorboard {

// CRC-32C of `data` (reflected polynomial 0x82F63B78, initial and final XOR 0xFFFFFFFF):
// Crc32c("123456789") == 0xE3069283.
uint32_t Crc32c(absl::string_view data);

// The record format's masked CRC: rotated right by 15 bits plus 0xA282EAD8 (a CRC of data
// that holds CRCs is then not itself a trivial CRC).
inline uint32_t MaskedCrc32c(absl::string_view data) {
  const uint32_t crc = Crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

}  // namespace tensorboard
}  // namespace kd

#endif  // LIBKD_TENSORBOARD_CRC32C_H_
