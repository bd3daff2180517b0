// Devices named by users ("cpu", "cuda", "cuda:1"), checked against what this process can use.
//
//   KD_ASSIGN_OR_RETURN(c10::Device device, kd::ParseDevice(absl::GetFlag(FLAGS_device)));
//   model->To(device);
//
// libkd's library targets link libtorch's CPU libraries only; a binary runs on CUDA when it
// also links @libtorch//:cuda (libtorch_cuda), as libkd's tools do. ParseDevice tells the
// three reasons a CUDA device cannot be used apart: the binary lacks the CUDA backend, the
// machine has no usable GPU, or the index is out of range.
#ifndef LIBKD_BASE_DEVICE_H_
#define LIBKD_BASE_DEVICE_H_

#include <c10/core/Device.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kd {

// Parses `spec` (cpu, cuda, cuda:N; "cuda" means cuda:0) and checks that the device exists
// here. InvalidArgument for a malformed spec or a device type libkd does not run on;
// FailedPrecondition naming the reason when a CUDA device is unavailable.
absl::StatusOr<c10::Device> ParseDevice(absl::string_view spec);

// Parses `spec` by its syntax only (the device need not exist here: a config written for
// another machine); InvalidArgument for a malformed spec or a device type other than cpu and
// cuda.
absl::StatusOr<c10::Device> ParseDeviceName(absl::string_view spec);

// Whether libtorch's CUDA backend (libtorch_cuda.so) is loaded into this process.
bool CudaBackendLinked();

}  // namespace kd

#endif  // LIBKD_BASE_DEVICE_H_
