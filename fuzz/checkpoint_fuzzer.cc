// The checkpoint reader on arbitrary bytes: kd::DecodeTorchSave (CRCs rewritten to match, so
// mutations reach the unpickler and the schema) then kd::CheckCheckpoint, which a box runs
// before it resumes.
#include <cstdint>
#include <string>

#include "base/torch_file.h"
#include "distill/boxes/checkpoint.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes =
      kd::fuzz::WithFixedCrcs(std::string(reinterpret_cast<const char*>(data), size));
  absl::StatusOr<c10::IValue> value = kd::DecodeTorchSave(bytes);
  if (value.ok()) (void)kd::CheckCheckpoint(*value);
  return 0;
}
