// The seam between //distill/boxes/distributed and //distill/boxes/distributed:nccl: ddp builds
// process groups without CUDA headers; linking :nccl (alwayslink) sets the factory at start-up, so
// that InitProcessGroup on a CUDA device gets libtorch's ProcessGroupNCCL.
#ifndef LIBKD_DISTILL_BOXES_DISTRIBUTED_INTERNAL_NCCL_BACKEND_H_
#define LIBKD_DISTILL_BOXES_DISTRIBUTED_INTERNAL_NCCL_BACKEND_H_

#include <chrono>

#include <c10/util/intrusive_ptr.h>

namespace c10d {
class Backend;
class Store;
}  // namespace c10d

namespace kd {
namespace distributed_internal {

// Makes rank `rank` of `size`'s NCCL backend over `store`, collectives timing out after
// `timeout`; throws c10::Error when NCCL cannot start (no GPU, say).
using NcclBackendFactory =
    c10::intrusive_ptr<c10d::Backend> (*)(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                          int size, std::chrono::milliseconds timeout);

// Null until //distill/boxes/distributed:nccl is linked; where it is linked without CUDA headers (a
// lean libtorch, no toolkit), a factory that throws why.
NcclBackendFactory& RegisteredNcclBackend();

}  // namespace distributed_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_DISTRIBUTED_INTERNAL_NCCL_BACKEND_H_
