// The seam between memdiag, which links libtorch's CPU libraries only, and its CUDA support
// (//memdiag:cuda_memory), which links libtorch's CUDA backend and registers itself here at
// start-up. Without it, memdiag's CUDA answers say which target to link.
#ifndef LIBKD_MEMDIAG_INTERNAL_CUDA_BACKEND_H_
#define LIBKD_MEMDIAG_INTERNAL_CUDA_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kd {
namespace memdiag_internal {

// A block the CUDA caching allocator has handed out (its "active_allocated" blocks).
struct CudaBlock {
  const void* address = nullptr;
  int64_t size = 0;
  int device = 0;
};

// torch.cuda.memory_allocated / memory_reserved / max_memory_allocated of one device.
struct CudaStats {
  int64_t allocated = 0;
  int64_t reserved = 0;
  int64_t peak = 0;
};

class CudaMemoryBackend {
 public:
  virtual ~CudaMemoryBackend() = default;
  // Whether a CUDA device can be used (torch.cuda.is_available()).
  virtual bool Available() const = 0;
  // `device` -1: the current device.
  virtual CudaStats Stats(int device) const = 0;
  // libtorch's torch::cuda::_record_memory_history("all", "all", "all", max_entries) and its
  // stop; the snapshot is torch::cuda::_memory_snapshot_pickled().
  virtual void StartHistory(size_t max_entries) = 0;
  virtual void StopHistory() = 0;
  virtual std::string SnapshotPickled() = 0;
  // The caching allocator's active blocks, from its snapshot.
  virtual std::vector<CudaBlock> ActiveBlocks() = 0;
};

// Registered by //memdiag:cuda_memory; null in a binary without it.
CudaMemoryBackend* GetCudaMemoryBackend();
void RegisterCudaMemoryBackend(CudaMemoryBackend* backend);

// The one wording for a binary without //memdiag:cuda_memory.
inline constexpr char kNoCudaMemorySupport[] =
    "this binary has no memdiag CUDA support (link //memdiag:cuda_memory, which brings "
    "@libtorch//:cuda)";

}  // namespace memdiag_internal
}  // namespace kd

#endif  // LIBKD_MEMDIAG_INTERNAL_CUDA_BACKEND_H_
