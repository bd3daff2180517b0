// Multi-process data parallelism on this machine, measured in one run: the binary starts copies
// of itself as 2 ranks on loopback (and as 1 process for the baseline).
//  1. Gloo allreduce bandwidth of a 16 MiB float tensor between 2 ranks;
//  2. the step time of an MLP training step on a global batch of 256: 1 process on all of it,
//     against 2 processes on 128 each with DataParallel (efficiency = throughput ratio / 2);
//  3. the Reducer's overlap: DataParallel's bucketed allreduce during backward, against the
//     same step with one allreduce of all gradients after backward.
//
//   bazel run -c opt //distill/boxes/distributed:ddp_benchmark
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include "absl/strings/str_cat.h"
#include "distill/boxes/distributed/ddp.h"
#include "hooks/native_model.h"

namespace kd {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kGlobalBatch = 256;
constexpr int kSteps = 30;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

torch::nn::Sequential Net() {
  at::manual_seed(1);
  return torch::nn::Sequential(torch::nn::Linear(784, 1024), torch::nn::ReLU(),
                               torch::nn::Linear(1024, 1024), torch::nn::ReLU(),
                               torch::nn::Linear(1024, 10));
}

void Sgd(torch::nn::Sequential& net) {
  at::NoGradGuard no_grad;
  for (at::Tensor& p : net->parameters()) {
    p.sub_(p.grad(), 0.01);
    p.mutable_grad().zero_();
  }
}

// Median seconds of a training step; `sync` is "reducer", "after" or "none".
double StepSeconds(torch::nn::Sequential& net, int batch, DataParallel* ddp,
                   c10d::ProcessGroup* group, bool after) {
  at::manual_seed(2);
  const at::Tensor x = at::randn({batch, 784});
  const at::Tensor y = at::randint(0, 10, {batch});
  std::vector<double> times;
  for (int step = 0; step < kSteps; ++step) {
    const Clock::time_point start = Clock::now();
    if (ddp != nullptr) ddp->PrepareForward();
    at::Tensor loss = at::cross_entropy_loss(net->forward(x), y);
    if (ddp != nullptr) ddp->PrepareBackward({loss});
    loss.backward();
    if (after) {  // one allreduce of every gradient once backward is done
      std::vector<at::Tensor> grads;
      for (const at::Tensor& p : net->parameters()) grads.push_back(p.grad().flatten());
      std::vector<at::Tensor> flat = {at::cat(grads)};
      group->allreduce(flat)->wait();
      flat[0].div_(group->getSize());
      int64_t offset = 0;
      for (at::Tensor& p : net->parameters()) {
        const int64_t n = p.numel();
        p.mutable_grad().copy_(flat[0].narrow(0, offset, n).view_as(p));
        offset += n;
      }
    }
    Sgd(net);
    if (step >= 5) times.push_back(Seconds(start));
  }
  return Median(times);
}

// A rank: prints "allreduce_gbps step_reducer_s step_after_s" (rank 0).
int Worker() {
  at::set_num_threads(1);
  absl::StatusOr<DistributedEnv> env = DistributedEnvFromEnvironment();
  if (!env.ok()) return 2;
  auto group = InitProcessGroup(*env, c10::Device(c10::kCPU), std::chrono::seconds(30));
  if (!group.ok()) {
    std::fprintf(stderr, "%s\n", std::string(group.status().message()).c_str());
    return 1;
  }
  // 1. Allreduce bandwidth: bytes reduced per second (algorithm bandwidth).
  std::vector<at::Tensor> t = {at::ones({4 * 1024 * 1024})};
  std::vector<double> times;
  for (int i = 0; i < 12; ++i) {
    const Clock::time_point start = Clock::now();
    (*group)->allreduce(t)->wait();
    if (i >= 2) times.push_back(Seconds(start));
  }
  const double gbps = 16.0 * 1024 * 1024 / Median(times) / 1e9;
  // 2. and 3.
  const int shard = kGlobalBatch / env->world_size;
  torch::nn::Sequential net = Net();
  std::unique_ptr<Model> model =
      MakeNativeModel(net.ptr(), [net](std::vector<c10::IValue>& args, const Kwargs&) mutable {
        return c10::IValue(net->forward(args.at(0).toTensor()));
      });
  auto ddp = DataParallel::Create(*model, *group);
  if (!ddp.ok()) return 1;
  const double reducer = StepSeconds(net, shard, ddp->get(), nullptr, false);
  ddp->reset();  // the Reducer's hooks go with it
  const double after = StepSeconds(net, shard, nullptr, group->get(), true);
  if (env->rank == 0) {
    std::ofstream(std::getenv("LIBKD_DDP_OUT")) << gbps << " " << reducer << " " << after << "\n";
  }
  return 0;
}

int Main() {
  at::set_num_threads(1);
  torch::nn::Sequential net = Net();
  const double single = StepSeconds(net, kGlobalBatch, nullptr, nullptr, false);
  const std::string out = "/tmp/libkd_ddp_benchmark.txt";
  const int port = FreeLoopbackPort();
  char self[] = "/proc/self/exe";
  char* const argv[] = {self, nullptr};
  absl::StatusOr<std::vector<int>> ranks =
      StartLocalRanks(2, port, argv, {"LIBKD_DDP_WORKER=1", "LIBKD_DDP_OUT=" + out});
  const absl::Status done = ranks.ok() ? WaitForRanks(*ranks) : ranks.status();
  double gbps = 0, reducer = 0, after = 0;
  std::ifstream in(out);
  if (!done.ok() || !(in >> gbps >> reducer >> after)) {
    std::fprintf(stderr, "the ranks failed\n");
    return 1;
  }
  std::printf(
      "Gloo allreduce of 16 MiB between 2 ranks on loopback: %.2f GB/s\n"
      "MLP 784-1024-1024-10 step, global batch %d, one intra-op thread per process (medians of "
      "%d steps):\n  1 process: %.2f ms; 2 processes x %d: %.2f ms -> speed-up %.2fx, "
      "efficiency %.0f%%\n"
      "  2 processes, one allreduce after backward instead of the Reducer's buckets: %.2f ms "
      "(Reducer / after = %.3f)\n",
      gbps, kGlobalBatch, kSteps - 5, single * 1e3, kGlobalBatch / 2, reducer * 1e3,
      single / reducer, single / reducer / 2 * 100, after * 1e3, reducer / after);
  return 0;
}

}  // namespace
}  // namespace kd

int main() {
  if (std::getenv("LIBKD_DDP_WORKER") != nullptr) return kd::Worker();
  return kd::Main();
}
