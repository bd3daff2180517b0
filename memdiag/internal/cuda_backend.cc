#include "memdiag/internal/cuda_backend.h"

#include <atomic>

namespace kd {
namespace memdiag_internal {
namespace {

std::atomic<CudaMemoryBackend*> backend{nullptr};

}  // namespace

CudaMemoryBackend* GetCudaMemoryBackend() { return backend.load(std::memory_order_acquire); }

void RegisterCudaMemoryBackend(CudaMemoryBackend* b) {
  backend.store(b, std::memory_order_release);
}

}  // namespace memdiag_internal
}  // namespace kd
