// How inventories and their diffs name things in text, as silverspoon-kd logs them: devices
// ("cpu", "cuda:0"), dtypes ("torch.float32"), storages no root reaches, and the units sizes
// print in. Shared by memdiag/inventory.cc (collection, owners, stats) and
// memdiag/inventory_diff.cc (diffs and their logs).
//
//   std::string dtype = memdiag_internal::DtypeName(t.scalar_type());  // "torch.float32"
//   absl::StrFormat("total=%.3fGiB", bytes / memdiag_internal::kGiB);
#ifndef LIBKD_MEMDIAG_INTERNAL_INVENTORY_TEXT_H_
#define LIBKD_MEMDIAG_INTERNAL_INVENTORY_TEXT_H_

#include <cstdint>
#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace kd {
namespace memdiag_internal {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
inline constexpr double kMiB = 1024.0 * 1024.0;

// "cpu" (never "cpu:0"), "cuda:0".
std::string DeviceName(c10::Device device);

// torch's name of `type`: "torch.float32".
std::string DtypeName(c10::ScalarType type);

// Who holds a storage no root reaches: "unowned: 4000 bytes allocated in scope "eval" step 3
// (#1234)" for the tracking allocator's allocation number `seq` (`scope` "": none; `step` -1:
// none), or "unowned: 4000 bytes on cuda:0 that no root reaches" where `seq` is 0 (a CUDA
// caching-allocator block).
std::string Unowned(int64_t nbytes, const std::string& device, uint64_t seq,
                    const std::string& scope, int64_t step);

}  // namespace memdiag_internal
}  // namespace kd

#endif  // LIBKD_MEMDIAG_INTERNAL_INVENTORY_TEXT_H_
