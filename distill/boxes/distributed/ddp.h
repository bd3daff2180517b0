// Multi-process data parallelism on PyTorch DDP's own engine, c10d: rendezvous from the
// environment torchrun sets, a process group over TCPStore (Gloo on CPU), and a model's
// gradients averaged across processes by c10d::Reducer (bucketed allreduce overlapped with
// backward), as Python's DistributedDataParallel does.
//
//   KD_ASSIGN_OR_RETURN(kd::DistributedEnv env, kd::DistributedEnvFromEnvironment());
//   KD_ASSIGN_OR_RETURN(auto group, kd::InitProcessGroup(env, device, std::chrono::seconds(60)));
//   KD_ASSIGN_OR_RETURN(std::unique_ptr<kd::DataParallel> ddp,
//                       kd::DataParallel::Create(student, group));  // rank 0's weights everywhere
//   for (batch : this rank's shard) {
//     ddp->PrepareForward();
//     at::Tensor loss = ...student.Forward(...)...;
//     ddp->PrepareBackward({loss});   // skip it (NoSync) to accumulate gradients locally
//     loss.backward();                // gradients arrive averaged over the ranks
//     optimizer.step();
//   }
//
// Errors are statuses naming the variable, the address or the rank concerned.
#ifndef LIBKD_DISTILL_BOXES_DISTRIBUTED_DDP_H_
#define LIBKD_DISTILL_BOXES_DISTRIBUTED_DDP_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>

#include "absl/status/statusor.h"
#include "hooks/model.h"

namespace c10d {
class ProcessGroup;
class Reducer;
}  // namespace c10d

namespace kd {

// What torchrun puts in the environment.
struct DistributedEnv {
  int rank = 0;                           // RANK
  int world_size = 1;                     // WORLD_SIZE
  int local_rank = 0;                     // LOCAL_RANK (default: RANK)
  int local_world_size = 1;               // LOCAL_WORLD_SIZE (default: WORLD_SIZE)
  std::string master_addr = "127.0.0.1";  // MASTER_ADDR
  int master_port = 29500;                // MASTER_PORT
};

// The environment's values; unset ones keep their defaults (a single process). InvalidArgument
// naming the variable for values that are not numbers or out of range (WORLD_SIZE < 1, RANK not
// in [0, WORLD_SIZE), a port outside 1..65535).
absl::StatusOr<DistributedEnv> DistributedEnvFromEnvironment();

// Joins the process group of `env`: rank 0 serves the TCPStore at MASTER_ADDR:MASTER_PORT, the
// others connect to it, all within `timeout`; collectives on CPU tensors go through Gloo, and
// on a CUDA device those on CUDA tensors through NCCL (libtorch's ProcessGroupNCCL, linked by
// //distill/boxes/distributed:nccl). Unavailable when the master cannot be reached (or its port is
// taken) in time, or NCCL cannot start (no GPU); Unimplemented for a CUDA device in a binary
// without
// //distill/boxes/distributed:nccl.
absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> InitProcessGroup(
    const DistributedEnv& env, c10::Device device, std::chrono::milliseconds timeout);

// A TCP port free on 127.0.0.1 now (the kernel's pick), for a rendezvous on this machine.
int FreeLoopbackPort();

// Starts `nproc` copies of this program (/proc/self/exe with `argv`, null-terminated) as ranks
// 0..nproc-1 of one run on this machine, with torchrun's environment (rendezvous at
// 127.0.0.1:`port`, LIBKD_LAUNCHED=1) and `extra_env` added; returns their pids by rank.
absl::StatusOr<std::vector<int>> StartLocalRanks(int nproc, int port, char* const* argv,
                                                 const std::vector<std::string>& extra_env = {});

// Waits for the ranks; when one fails, stops the others (SIGTERM). Internal naming the first
// rank that failed and how.
absl::Status WaitForRanks(const std::vector<int>& pids);

// Copies rank 0's parameters and buffers of `model` into every rank's (one broadcast each).
// Unavailable when a collective fails.
absl::Status BroadcastFromRankZero(Model& model, c10d::ProcessGroup& group);

struct DataParallelOptions {
  // Bucket size for the allreduce (DDP's bucket_cap_mb), in MiB.
  double bucket_cap_mb = 25;
  // Parameters that get no gradient in a step are tolerated (DDP's find_unused_parameters).
  bool find_unused_parameters = false;
  // Tensors that train beside the models (auxiliary modules, a loss's own parameters): broadcast
  // from rank 0 and averaged with the models' gradients, as they would be inside a model that
  // Python's DDP wraps. Those that do not require grad are only broadcast.
  std::vector<at::Tensor> extra_parameters;
};

// Models' trainable parameters kept in sync across the group's processes.
class DataParallel {
 public:
  // Broadcasts the models' parameters and buffers (and the options' extra parameters) from rank
  // 0, then builds one Reducer over their trainable parameters (buckets from
  // compute_bucket_assignment_by_size, in reverse order of registration, as DDP assigns them).
  // InvalidArgument when nothing trains.
  static absl::StatusOr<std::unique_ptr<DataParallel>> Create(
      const std::vector<Model*>& models, c10::intrusive_ptr<c10d::ProcessGroup> group,
      const DataParallelOptions& options = {});
  // One model.
  static absl::StatusOr<std::unique_ptr<DataParallel>> Create(
      Model& model, c10::intrusive_ptr<c10d::ProcessGroup> group,
      const DataParallelOptions& options = {});
  ~DataParallel();

  // Before each forward.
  void PrepareForward();
  // After the forward, with the outputs the loss depends on: the next backward averages the
  // gradients across ranks. Not calling it (DDP's no_sync) accumulates gradients locally.
  void PrepareBackward(const std::vector<at::Tensor>& outputs);

  int rank() const;
  int world_size() const;

 private:
  DataParallel() = default;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  std::unique_ptr<c10d::Reducer> reducer_;
};

}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_DISTRIBUTED_DDP_H_
