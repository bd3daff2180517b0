// The readers of torch files on arbitrary bytes: the zip structure and CRC checks
// (base/torch_archive), then libtorch's unpickler behind kd::DecodeTorchSave. An odd first
// byte rewrites the CRCs to match first, so mutations reach the unpickler.
#include <cstdint>
#include <string>

#include "base/torch_archive.h"
#include "base/torch_file.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) bytes = kd::fuzz::WithFixedCrcs(std::move(bytes));
  (void)kd::InspectTorchArchive(bytes);
  (void)kd::VerifyTorchArchive(bytes);
  (void)kd::DecodeTorchSave(bytes);
  return 0;
}
