#include "distill/boxes/distributed/ddp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "distill/boxes/distributed/internal/nccl_backend.h"
#include "distill/boxes/distributed/internal/rendezvous.h"

extern char** environ;

namespace kd {
namespace {

using distributed_internal::ConnectCause;
using distributed_internal::Deadline;
using distributed_internal::QuietTorchLogs;
using distributed_internal::ReachBefore;
using distributed_internal::Resolve;

// The integer in environment variable `name`, or `fallback` when it is unset.
absl::StatusOr<int> EnvInt(const char* name, int fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  int value = 0;
  if (!absl::SimpleAtoi(text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "=", text,
                     " is not an integer (torchrun sets it: RANK, WORLD_SIZE, "
                     "LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT)"));
  }
  return value;
}

// A libtorch error's first line: its message without the trace libtorch appends.
}  // namespace

namespace distributed_internal {
NcclBackendFactory& RegisteredNcclBackend() {
  static NcclBackendFactory factory = nullptr;
  return factory;
}
}  // namespace distributed_internal

absl::StatusOr<DistributedEnv> DistributedEnvFromEnvironment() {
  DistributedEnv env;
  KD_ASSIGN_OR_RETURN(env.world_size, EnvInt("WORLD_SIZE", 1));
  KD_ASSIGN_OR_RETURN(env.rank, EnvInt("RANK", 0));
  KD_ASSIGN_OR_RETURN(env.local_rank, EnvInt("LOCAL_RANK", env.rank));
  KD_ASSIGN_OR_RETURN(env.local_world_size, EnvInt("LOCAL_WORLD_SIZE", env.world_size));
  KD_ASSIGN_OR_RETURN(env.master_port, EnvInt("MASTER_PORT", env.master_port));
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') {
    env.master_addr = addr;
  }
  if (env.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("WORLD_SIZE=", env.world_size, ": the number of processes must be >= 1"));
  }
  if (env.rank < 0 || env.rank >= env.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("RANK=", env.rank, " is not in [0, WORLD_SIZE=", env.world_size, ")"));
  }
  if (env.master_port < 1 || env.master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("MASTER_PORT=", env.master_port, " is not a port (1..65535)"));
  }
  // The environment as a whole, as torchrun sets it: a rank of several names itself.
  if (env.world_size > 1) {
    const char* rank = std::getenv("RANK");
    if (rank == nullptr || *rank == '\0') {
      return absl::InvalidArgumentError(absl::StrCat(
          "WORLD_SIZE=", env.world_size, " without RANK: each of the processes needs its RANK (0..",
          env.world_size - 1,
          "); torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and "
          "MASTER_PORT together"));
    }
  }
  if (env.local_world_size < 1 || env.local_world_size > env.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("LOCAL_WORLD_SIZE=", env.local_world_size,
                                                   " is not in [1, WORLD_SIZE=", env.world_size,
                                                   "]"));
  }
  if (env.local_rank < 0 || env.local_rank >= env.local_world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("LOCAL_RANK=", env.local_rank,
                     " is not in [0, LOCAL_WORLD_SIZE=", env.local_world_size, ")"));
  }
  return env;
}

absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> InitProcessGroup(
    const DistributedEnv& env, c10::Device device, std::chrono::milliseconds timeout) {
  const distributed_internal::NcclBackendFactory nccl =
      distributed_internal::RegisteredNcclBackend();
  if (device.is_cuda() && nccl == nullptr) {
    return absl::UnimplementedError(
        "multi-process training on CUDA needs NCCL, which this binary does not link: add "
        "//distill/boxes/distributed:nccl to its deps (//tools:distill has it), or train on cpu "
        "(Gloo)");
  }
  // One deadline for the whole rendezvous: resolving the master, reaching it, the store, Gloo.
  const Deadline deadline(timeout);
  const std::string where = absl::StrCat(env.master_addr, ":", env.master_port);
  KD_ASSIGN_OR_RETURN(const sockaddr_storage master, Resolve(env.master_addr, env.master_port));
  if (env.rank != 0) {
    // Reached by a plain connect first, retried until the deadline: the cause of a failure is
    // then known (nothing listening, no route, no answer), and the time is the deadline's.
    const int err = ReachBefore(master, deadline);
    if (err != 0) {
      return absl::UnavailableError(absl::StrCat(
          "rank ", env.rank, " cannot reach the master at ", where, " within ", timeout.count(),
          " ms: ", ConnectCause(err), " (is rank 0 running? MASTER_ADDR, MASTER_PORT)"));
    }
  }
  // libtorch's socket warnings (an IPv6 listen that fell back, each retry) are not this run's
  // output: the outcome is this function's one status.
  const QuietTorchLogs quiet;
  const std::string store_context =
      env.rank == 0
          ? absl::StrCat("rank 0 cannot serve the rendezvous at ", where,
                         " (is MASTER_PORT in use?)")
          : absl::StrCat("rank ", env.rank, " cannot reach the master at ", where, " within ",
                         timeout.count(), " ms (is rank 0 running? MASTER_ADDR, MASTER_PORT)");
  KD_ASSIGN_OR_RETURN(c10::intrusive_ptr<c10d::Store> store,
                      CallTorch(store_context, absl::StatusCode::kUnavailable,
                                [&]() -> c10::intrusive_ptr<c10d::Store> {
                                  c10d::TCPStoreOptions options;
                                  options.port = static_cast<std::uint16_t>(env.master_port);
                                  options.isServer = env.rank == 0;
                                  options.numWorkers = static_cast<size_t>(env.world_size);
                                  options.waitWorkers = false;
                                  options.timeout = deadline.Left();
                                  return c10::make_intrusive<c10d::TCPStore>(env.master_addr,
                                                                             options);
                                }));
  // As Python's init_process_group("cpu:gloo,cuda:nccl"): Gloo for CPU tensors, NCCL for
  // CUDA ones on a CUDA device, each backend under its device's prefix in the store.
  return CallTorch(absl::StrCat("rank ", env.rank, " of ", env.world_size,
                                ": the process group did not form within ", timeout.count(), " ms"),
                   absl::StatusCode::kUnavailable, [&]() -> c10::intrusive_ptr<c10d::ProcessGroup> {
                     auto options = c10d::ProcessGroupGloo::Options::create(deadline.Left());
                     options->devices.push_back(
                         c10d::ProcessGroupGloo::createDeviceForHostname(env.master_addr));
                     auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(
                         c10::make_intrusive<c10d::PrefixStore>("cpu/", store), env.rank,
                         env.world_size, options);
                     auto group =
                         c10::make_intrusive<c10d::ProcessGroup>(store, env.rank, env.world_size);
                     group->setBackend(c10::kCPU, c10d::ProcessGroup::GLOO, gloo);
                     group->setDefaultBackend(c10d::ProcessGroup::GLOO);
                     if (device.is_cuda()) {
                       c10::intrusive_ptr<c10d::Backend> backend =
                           nccl(c10::make_intrusive<c10d::PrefixStore>("cuda/", store), env.rank,
                                env.world_size, deadline.Left());
                       group->setBackend(c10::kCUDA, c10d::ProcessGroup::NCCL, backend);
                       group->setDefaultBackend(c10d::ProcessGroup::NCCL);
                     }
                     return group;
                   });
}

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

absl::StatusOr<std::vector<int>> StartLocalRanks(int nproc, int port, char* const* argv,
                                                 const std::vector<std::string>& extra_env) {
  std::vector<int> pids;
  for (int rank = 0; rank < nproc; ++rank) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
    for (const std::string& s :
         {absl::StrCat("RANK=", rank), absl::StrCat("WORLD_SIZE=", nproc),
          absl::StrCat("LOCAL_RANK=", rank), absl::StrCat("LOCAL_WORLD_SIZE=", nproc),
          std::string("MASTER_ADDR=127.0.0.1"), absl::StrCat("MASTER_PORT=", port),
          std::string("LIBKD_LAUNCHED=1")}) {
      env.push_back(s);
    }
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> envp;
    for (std::string& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    pid_t pid = 0;
    if (const int error = posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr,
                                      const_cast<char* const*>(argv), envp.data());
        error != 0) {
      for (int started : pids) kill(started, SIGTERM);
      return absl::InternalError(
          absl::StrCat("cannot start rank ", rank, ": ", std::strerror(error)));
    }
    pids.push_back(pid);
  }
  return pids;
}

absl::Status WaitForRanks(const std::vector<int>& pids) {
  int failed = -1;
  std::string how;
  for (size_t done = 0; done < pids.size(); ++done) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    const auto it = std::find(pids.begin(), pids.end(), pid);
    if (pid < 0 || it == pids.end()) continue;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && failed < 0) {
      failed = static_cast<int>(it - pids.begin());
      how = WIFEXITED(status) ? absl::StrCat("exited with code ", WEXITSTATUS(status))
                              : absl::StrCat("was killed by signal ", WTERMSIG(status));
      for (int other : pids) {
        if (other != pid) kill(other, SIGTERM);
      }
    }
  }
  if (failed < 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("rank ", failed, " ", how, "; the other ranks were stopped"));
}

absl::Status BroadcastFromRankZero(Model& model, c10d::ProcessGroup& group) {
  // Gloo throws its own exceptions (gloo::IoException) as well as c10's.
  const absl::Status done = CallTorch([&] {
    at::NoGradGuard no_grad;
    for (const std::vector<NamedTensor>& tensors :
         {model.NamedParameters(), model.NamedBuffers()}) {
      for (const auto& [name, tensor] : tensors) {
        std::vector<at::Tensor> one = {tensor};
        group.broadcast(one)->wait();
      }
    }
  });
  if (done.ok()) return done;
  return absl::UnavailableError(
      absl::StrCat("broadcasting rank 0's parameters failed: ", done.message()));
}

absl::StatusOr<std::unique_ptr<DataParallel>> DataParallel::Create(
    const std::vector<Model*>& models, c10::intrusive_ptr<c10d::ProcessGroup> group,
    const DataParallelOptions& options) {
  std::unique_ptr<DataParallel> ddp(new DataParallel());
  ddp->group_ = std::move(group);
  std::vector<at::Tensor> params;
  // Everyone starts from rank 0's weights and buffers.
  for (Model* model : models) {
    KD_RETURN_IF_ERROR(BroadcastFromRankZero(*model, *ddp->group_));
    for (const auto& [name, p] : model->NamedParameters()) {
      if (p.requires_grad()) params.push_back(p);
    }
  }
  const absl::Status broadcast = CallTorch([&] {
    at::NoGradGuard no_grad;
    for (const at::Tensor& tensor : options.extra_parameters) {
      std::vector<at::Tensor> one = {tensor};
      ddp->group_->broadcast(one)->wait();
    }
  });
  if (!broadcast.ok()) {
    return absl::UnavailableError(
        absl::StrCat("broadcasting rank 0's parameters failed: ", broadcast.message()));
  }
  for (const at::Tensor& p : options.extra_parameters) {
    if (p.requires_grad()) params.push_back(p);
  }
  if (params.empty()) {
    return absl::InvalidArgumentError(
        "DataParallel: the model has no trainable parameters (a frozen teacher needs no "
        "wrapper)");
  }
  const int64_t cap = static_cast<int64_t>(options.bucket_cap_mb * 1024 * 1024);
  const int64_t first_cap = 1024 * 1024;  // DDP's first bucket: 1 MiB, to start allreduce early
  std::vector<int64_t> reversed(params.size());
  for (size_t i = 0; i < params.size(); ++i)
    reversed[i] = static_cast<int64_t>(params.size() - 1 - i);
  const std::vector<bool> sparse(params.size(), false);
  KD_RETURN_IF_ERROR(CallTorch("DataParallel: c10d::Reducer", absl::StatusCode::kInternal, [&] {
    auto [buckets, limits] = c10d::compute_bucket_assignment_by_size(
        params, {static_cast<size_t>(first_cap), static_cast<size_t>(cap)}, sparse, reversed);
    std::vector<int64_t> caps(limits.begin(), limits.end());
    ddp->reducer_ = std::make_unique<c10d::Reducer>(
        params, std::move(buckets), ddp->group_, sparse, cap, options.find_unused_parameters,
        /*gradient_as_bucket_view=*/false, std::unordered_map<size_t, std::string>(), first_cap,
        /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false, std::move(caps));
  }));
  return ddp;
}

absl::StatusOr<std::unique_ptr<DataParallel>> DataParallel::Create(
    Model& model, c10::intrusive_ptr<c10d::ProcessGroup> group,
    const DataParallelOptions& options) {
  return Create(std::vector<Model*>{&model}, std::move(group), options);
}

DataParallel::~DataParallel() = default;

void DataParallel::PrepareForward() {
  reducer_->prepare_for_forward();
  // As DDP's _pre_forward: rebuilds the buckets once, in the order the gradients became ready
  // in the first step, and first checks that the previous step's reduction finished. That
  // check is what stops a model with a parameter the loss did not use when
  // find_unused_parameters is off; without it, that parameter's bucket would never be reduced
  // and its other gradients would silently stay unaveraged.
  reducer_->rebuild_buckets();
}

void DataParallel::PrepareBackward(const std::vector<at::Tensor>& outputs) {
  reducer_->prepare_for_backward(outputs);
}

int DataParallel::rank() const { return group_->getRank(); }
int DataParallel::world_size() const { return group_->getSize(); }

}  // namespace kd
