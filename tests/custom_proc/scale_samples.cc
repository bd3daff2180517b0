#include "tests/custom_proc/scale_samples.h"

#include "absl/strings/str_cat.h"

namespace kd {
namespace test {

absl::Status ScaleSamples(TrainingContext&, Batch& batch, const Kwargs& kwargs) {
  if (!batch.samples.isTensor()) {
    return absl::InvalidArgumentError(
        absl::StrCat("scale_samples needs tensor samples, got ", batch.samples.tagKind()));
  }
  auto factor = kwargs.find("factor");
  if (factor == kwargs.end()) return absl::OkStatus();
  batch.samples = batch.samples.toTensor().mul(factor->second.toDouble());
  return absl::OkStatus();
}

KD_REGISTER_PROC_FUNC(PreForwardProc, "scale_samples", ScaleSamples,
                      {{"factor", KwargType::kNumber, "multiplies the samples; default 1"}});

}  // namespace test
}  // namespace kd
