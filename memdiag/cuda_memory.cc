// memdiag's CUDA support: libtorch's CUDA caching allocator behind memdiag's CUDA answers
// (FormatMemoryStats on a CUDA device, unowned CUDA blocks in storage inventories,
// RecordMemoryHistory on a CUDA device). Linking //memdiag:cuda_memory registers it; it needs no
// CUDA headers (c10's device-generic allocator interface and libtorch's C++ memory-history
// calls), so it compiles wherever @libtorch//:cuda links, GPU or not.
#ifdef LIBKD_CUDA_BACKEND

#include <string>
#include <vector>

#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <torch/csrc/cuda/memory_snapshot.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/cuda.h>

#include "memdiag/internal/cuda_backend.h"

namespace kd {
namespace memdiag_internal {
namespace {

constexpr size_t kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

class LibtorchCudaMemory final : public CudaMemoryBackend {
 public:
  bool Available() const override { return torch::cuda::is_available(); }

  CudaStats Stats(int device) const override {
    const c10::DeviceIndex index = device >= 0 ? static_cast<c10::DeviceIndex>(device)
                                               : at::detail::getCUDAHooks().current_device();
    const c10::CachingDeviceAllocator::DeviceStats stats =
        c10::getDeviceAllocator(c10::kCUDA)->getDeviceStats(index);
    return CudaStats{.allocated = stats.allocated_bytes[kAggregate].current,
                     .reserved = stats.reserved_bytes[kAggregate].current,
                     .peak = stats.allocated_bytes[kAggregate].peak};
  }

  void StartHistory(size_t max_entries) override {
    torch::cuda::_record_memory_history(std::string("all"), std::string("all"), "all",
                                        max_entries);
  }
  void StopHistory() override { torch::cuda::_record_memory_history(std::nullopt); }
  std::string SnapshotPickled() override { return torch::cuda::_memory_snapshot_pickled(); }

  std::vector<CudaBlock> ActiveBlocks() override {
    const std::string bytes = SnapshotPickled();
    const c10::IValue snapshot = torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
    std::vector<CudaBlock> out;
    for (const c10::IValue& segment : snapshot.toGenericDict().at("segments").toListRef()) {
      const c10::impl::GenericDict s = segment.toGenericDict();
      const int device = static_cast<int>(s.at("device").toInt());
      for (const c10::IValue& block : s.at("blocks").toListRef()) {
        const c10::impl::GenericDict b = block.toGenericDict();
        if (b.at("state").toStringRef() != "active_allocated") continue;
        out.push_back(CudaBlock{
            .address = reinterpret_cast<const void*>(static_cast<uintptr_t>(b.at("address").toInt())),
            .size = b.at("size").toInt(),
            .device = device});
      }
    }
    return out;
  }
};

// Registers the backend when this library is linked (alwayslink).
const bool registered = [] {
  static LibtorchCudaMemory backend;
  RegisterCudaMemoryBackend(&backend);
  return true;
}();

}  // namespace
}  // namespace memdiag_internal
}  // namespace kd

#endif  // LIBKD_CUDA_BACKEND
