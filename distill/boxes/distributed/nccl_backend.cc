// NCCL for multi-process training on CUDA: libtorch's own c10d::ProcessGroupNCCL (in
// libtorch_cuda), registered with //distill/boxes/distributed at start-up. Compiled with the CUDA
// toolkit's and NCCL's headers where @libtorch//:cuda_headers has them (LIBKD_CUDA_HEADERS); a
// GPU is needed only to run it.
#include "distill/boxes/distributed/internal/nccl_backend.h"

#include <chrono>

#include <c10/util/Exception.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#ifdef LIBKD_CUDA_HEADERS
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace kd {
namespace distributed_internal {
namespace {

c10::intrusive_ptr<c10d::Backend> MakeNcclBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int rank, int size,
                                                  std::chrono::milliseconds timeout) {
#ifdef LIBKD_CUDA_HEADERS
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
#else
  (void)store, (void)rank, (void)size, (void)timeout;
  TORCH_CHECK(false,
              "this libkd was built without NCCL: @libtorch//:cuda_headers found no CUDA "
              "toolkit or NCCL headers (install the toolkit or set CUDA_HOME, then "
              "`bazel sync --only=libtorch`)");
#endif
}

const bool kRegistered = (RegisteredNcclBackend() = &MakeNcclBackend, true);

}  // namespace
}  // namespace distributed_internal
}  // namespace kd
