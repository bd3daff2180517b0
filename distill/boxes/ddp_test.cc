// Data parallelism across 2 processes on loopback. The test binary starts copies of itself as
// the ranks (LIBKD_DDP_WORKER set), as torchrun would start a training program.
#include "distill/boxes/ddp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
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
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hooks/native_model.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 4;
constexpr int kGlobalBatch = 8;

// The global batches, the same in every process.
std::pair<at::Tensor, at::Tensor> Data() {
  at::manual_seed(7);
  return {at::randn({kSteps, kGlobalBatch, 8}), at::randint(0, 3, {kSteps, kGlobalBatch})};
}

torch::nn::Sequential Net(int seed) {
  at::manual_seed(seed);
  return torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::ReLU(),
                               torch::nn::Linear(16, 3));
}

void SgdStep(torch::nn::Sequential& net) {
  at::NoGradGuard no_grad;
  for (at::Tensor& p : net->parameters()) {
    p.sub_(p.grad(), 0.1);
    p.mutable_grad().zero_();
  }
}

at::Tensor Flat(const torch::nn::Sequential& net) {
  std::vector<at::Tensor> parts;
  for (const at::Tensor& p : net->parameters()) parts.push_back(p.detach().flatten());
  return at::cat(parts);
}

// One rank: its shard of each global batch (rows rank*4 .. rank*4+3), gradients averaged by the
// Reducer, plain SGD. Writes its final parameters to LIBKD_DDP_OUT.
int Worker() {
  at::set_num_threads(1);
  absl::StatusOr<DistributedEnv> env = DistributedEnvFromEnvironment();
  if (!env.ok()) {
    std::cerr << env.status().message() << "\n";
    return 2;
  }
  auto group = InitProcessGroup(*env, c10::Device(c10::kCPU), std::chrono::seconds(5));
  if (!group.ok()) {
    std::cerr << group.status().message() << "\n";
    return 1;
  }
  if (std::getenv("LIBKD_DDP_DIE") != nullptr && env->rank == 1) _exit(3);  // a rank that dies
  torch::nn::Sequential net = Net(/*seed=*/100 + env->rank);  // rank 0's weights must win
  std::unique_ptr<Model> model =
      MakeNativeModel(net.ptr(), [net](std::vector<c10::IValue>& args, const Kwargs&) mutable {
        return c10::IValue(net->forward(args.at(0).toTensor()));
      });
  absl::StatusOr<std::unique_ptr<DataParallel>> ddp = DataParallel::Create(*model, *group);
  if (!ddp.ok()) {
    std::cerr << "rank " << env->rank << ": " << ddp.status().message() << "\n";
    return 1;
  }
  const auto [x, y] = Data();
  const int shard = kGlobalBatch / env->world_size;
  for (int step = 0; step < kSteps; ++step) {
    (*ddp)->PrepareForward();
    at::Tensor logits = net->forward(x[step].narrow(0, env->rank * shard, shard));
    at::Tensor loss = at::cross_entropy_loss(logits, y[step].narrow(0, env->rank * shard, shard));
    (*ddp)->PrepareBackward({loss});
    loss.backward();
    SgdStep(net);
  }
  std::ofstream out(absl::StrCat(std::getenv("LIBKD_DDP_OUT"), env->rank, ".txt"));
  const at::Tensor flat = Flat(net);
  for (int64_t i = 0; i < flat.numel(); ++i) out << flat[i].item<double>() << "\n";
  return out ? 0 : 1;
}

char kSelf[] = "/proc/self/exe";
char* const kArgv[] = {kSelf, nullptr};

int Wait(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<double> ReadValues(const std::string& path) {
  std::ifstream in(path);
  std::vector<double> values;
  for (double v; in >> v;) values.push_back(v);
  return values;
}

// Two ranks end with identical parameters, equal (atol 1e-5) to one process training on the
// same global batches: the Reducer averages the shards' gradients, and rank 0's initial weights
// reach rank 1 (which starts from other ones).
TEST(DataParallelTest, TwoRanksTrainAsOneProcessOnTheGlobalBatch) {
  const std::string dir = ::testing::TempDir();
  const int port = FreeLoopbackPort();
  absl::StatusOr<std::vector<int>> ranks =
      StartLocalRanks(2, port, kArgv, {"LIBKD_DDP_WORKER=1", "LIBKD_DDP_OUT=" + dir + "/rank"});
  ASSERT_THAT(ranks, IsOk());
  ASSERT_THAT(WaitForRanks(*ranks), IsOk());
  const std::vector<double> p0 = ReadValues(dir + "/rank0.txt");
  const std::vector<double> p1 = ReadValues(dir + "/rank1.txt");

  torch::nn::Sequential net = Net(/*seed=*/100);
  const auto [x, y] = Data();
  for (int step = 0; step < kSteps; ++step) {
    at::cross_entropy_loss(net->forward(x[step]), y[step]).backward();
    SgdStep(net);
  }
  const at::Tensor expected = Flat(net);
  ASSERT_EQ(p0.size(), static_cast<size_t>(expected.numel()));
  EXPECT_EQ(p0, p1);
  for (size_t i = 0; i < p0.size(); ++i) {
    EXPECT_NEAR(p0[i], expected[i].item<double>(), 1e-5) << i;
  }
  // The ranks moved away from the initial weights (a test of something).
  EXPECT_GT((Flat(Net(100)) - expected).abs().max().item<double>(), 1e-3);
}

// A rank that dies after joining: the other fails within the timeout instead of hanging.
TEST(DataParallelTest, ALostRankMakesTheOtherExitNonZero) {
  const std::string dir = ::testing::TempDir();
  const int port = FreeLoopbackPort();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<int>> ranks = StartLocalRanks(
      2, port, kArgv, {"LIBKD_DDP_WORKER=1", "LIBKD_DDP_DIE=1", "LIBKD_DDP_OUT=" + dir + "/dead"});
  ASSERT_THAT(ranks, IsOk());
  EXPECT_EQ(Wait((*ranks)[1]), 3);  // each waited for on its own: nobody stops rank 0
  EXPECT_NE(Wait((*ranks)[0]), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

TEST(DataParallelTest, BadEnvironmentNamesTheVariable) {
  setenv("WORLD_SIZE", "0", 1);
  EXPECT_THAT(DistributedEnvFromEnvironment(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "WORLD_SIZE=0: the number of processes must be >= 1"));
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", "2", 1);
  EXPECT_THAT(DistributedEnvFromEnvironment(),
              StatusIs(absl::StatusCode::kInvalidArgument, "RANK=2 is not in [0, WORLD_SIZE=2)"));
  setenv("RANK", "one", 1);
  EXPECT_THAT(DistributedEnvFromEnvironment(), StatusIs(absl::StatusCode::kInvalidArgument,
                                                        HasSubstr("RANK=one is not an integer")));
  setenv("RANK", "1", 1);
  setenv("MASTER_PORT", "70000", 1);
  EXPECT_THAT(
      DistributedEnvFromEnvironment(),
      StatusIs(absl::StatusCode::kInvalidArgument, "MASTER_PORT=70000 is not a port (1..65535)"));
  unsetenv("WORLD_SIZE");
  unsetenv("RANK");
  unsetenv("MASTER_PORT");
  absl::StatusOr<DistributedEnv> single = DistributedEnvFromEnvironment();
  ASSERT_THAT(single, IsOk());
  EXPECT_EQ(single->world_size, 1);
  EXPECT_EQ(single->rank, 0);
}

TEST(DataParallelTest, AnUnreachableMasterIsOneClearError) {
  DistributedEnv env{.rank = 1, .world_size = 2, .master_port = FreeLoopbackPort()};
  EXPECT_THAT(InitProcessGroup(env, c10::Device(c10::kCPU), std::chrono::milliseconds(1500)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr(absl::StrCat("rank 1 cannot reach the master at 127.0.0.1:",
                                              env.master_port, " within 1500 ms"))));
  EXPECT_THAT(InitProcessGroup({}, c10::Device(c10::kCUDA, 0), std::chrono::seconds(1)),
              StatusIs(absl::StatusCode::kUnimplemented));
}

// Rank 0 cannot serve the rendezvous on a port another program listens on.
TEST(DataParallelTest, APortInUseIsOneClearError) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  DistributedEnv env{.rank = 0, .world_size = 2, .master_port = ntohs(addr.sin_port)};
  EXPECT_THAT(InitProcessGroup(env, c10::Device(c10::kCPU), std::chrono::milliseconds(1500)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr(absl::StrCat("rank 0 cannot serve the rendezvous at 127.0.0.1:",
                                              env.master_port, " (is MASTER_PORT in use?)"))));
  close(fd);
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) {
  if (std::getenv("LIBKD_DDP_WORKER") != nullptr) return kd::Worker();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
