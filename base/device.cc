#include "base/device.h"

#include <dlfcn.h>

#include <string>

#include <torch/cuda.h>

#include "absl/strings/str_cat.h"
#include "base/torch_status.h"

namespace kd {

bool CudaBackendLinked() {
  // RTLD_NOLOAD: only asks whether the library is already in the process; never loads it.
  void* handle = ::dlopen("libtorch_cuda.so", RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  ::dlclose(handle);
  return true;
}

absl::StatusOr<c10::Device> ParseDeviceName(absl::string_view spec) {
  absl::StatusOr<c10::Device> parsed =
      CallTorch([&] { return c10::Device(std::string(spec)); }, absl::StatusCode::kInvalidArgument);
  if (!parsed.ok() || (!parsed->is_cpu() && !parsed->is_cuda())) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad device \"", spec, "\": use cpu, cuda or cuda:N"));
  }
  return *parsed;
}

absl::StatusOr<c10::Device> ParseDevice(absl::string_view spec) {
  absl::StatusOr<c10::Device> parsed = ParseDeviceName(spec);
  if (!parsed.ok()) return parsed.status();
  c10::Device device = *parsed;
  if (device.is_cpu()) return c10::Device(c10::kCPU);
  if (!CudaBackendLinked()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", spec, ": this binary has no CUDA backend (libtorch_cuda is not loaded: link "
        "@libtorch//:cuda, with torch's CUDA libraries installed)"));
  }
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  if (count == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", spec, ": no CUDA device is available here (no GPU, or no driver); use cpu"));
  }
  const int64_t index = device.has_index() ? device.index() : 0;
  if (index >= count) {
    return absl::InvalidArgumentError(absl::StrCat("device ", spec, ": there are only ",
                                                      count, " CUDA device(s), cuda:0 to cuda:",
                                                      count - 1));
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace kd
