// Data parallelism across 2 processes on loopback. The test binary starts copies of itself as
// the ranks (LIBKD_DDP_WORKER set), as torchrun would start a training program.
#include "distill/boxes/distributed/ddp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
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
#include "distill/boxes/distributed/rank_monitor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hooks/native_model.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

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

// Where a worker dies, from LIBKD_DDP_DIE="<rank>:<step>[:failed|:hangs]": that rank leaves
// before the backward of that step, killed (_exit(3), nothing said) or, with ":failed", after
// reporting an error of its own; with ":hangs" it stops (SIGSTOP) there instead. Step -1: right
// after joining the group.
struct Death {
  int rank = -1;
  int step = 0;
  bool reported = false;
  bool hangs = false;
};

Death DeathFromEnvironment() {
  Death death;
  if (const char* text = std::getenv("LIBKD_DDP_DIE"); text != nullptr) {
    char how[16] = "";
    std::sscanf(text, "%d:%d:%15s", &death.rank, &death.step, how);
    death.reported = std::string(how) == "failed";
    death.hangs = std::string(how) == "hangs";
  }
  return death;
}

// One rank: its shard of each global batch (rows rank*4 .. rank*4+3), gradients averaged by the
// Reducer, plain SGD. Writes its final parameters to LIBKD_DDP_OUT<rank>.txt and, when a
// collective fails, the monitor's explanation to LIBKD_DDP_OUT<rank>.err.
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
  absl::StatusOr<std::unique_ptr<RankMonitor>> monitor = RankMonitor::Start(*group);
  if (!monitor.ok()) {
    std::cerr << monitor.status().message() << "\n";
    return 1;
  }
  const std::string out = absl::StrCat(std::getenv("LIBKD_DDP_OUT"), env->rank);
  const auto fail = [&](absl::string_view error) {
    std::ofstream(out + ".err") << (*monitor)->Explain(error).message();
    return 4;
  };
  const Death death = DeathFromEnvironment();
  const auto die_here = [&](int step) {
    if (death.rank != env->rank || death.step != step) return;
    if (death.hangs) raise(SIGSTOP);  // stopped, not dead: its sockets stay open
    if (death.reported) {
      (*monitor)->ReportFailure("the batch of step 3 was bad");
      std::exit(5);
    }
    _exit(3);  // a rank that dies
  };
  die_here(-1);
  torch::nn::Sequential net = Net(/*seed=*/100 + env->rank);  // rank 0's weights must win
  std::unique_ptr<Model> model =
      MakeNativeModel(net.ptr(), [net](std::vector<c10::IValue>& args, const Kwargs&) mutable {
        return c10::IValue(net->forward(args.at(0).toTensor()));
      });
  absl::StatusOr<std::unique_ptr<DataParallel>> ddp = DataParallel::Create(*model, *group);
  if (!ddp.ok()) return fail(ddp.status().message());
  const auto [x, y] = Data();
  const int shard = kGlobalBatch / env->world_size;
  try {
    for (int step = 0; step < kSteps; ++step) {
      (*ddp)->PrepareForward();
      at::Tensor logits = net->forward(x[step].narrow(0, env->rank * shard, shard));
      at::Tensor loss = at::cross_entropy_loss(logits, y[step].narrow(0, env->rank * shard, shard));
      (*ddp)->PrepareBackward({loss});
      die_here(step);
      loss.backward();
      SgdStep(net);
    }
  } catch (const std::exception& error) {
    return fail(error.what());
  }
  std::ofstream file(out + ".txt");
  const at::Tensor flat = Flat(net);
  for (int64_t i = 0; i < flat.numel(); ++i) file << flat[i].item<double>() << "\n";
  return file ? 0 : 1;
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

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs 2 ranks with LIBKD_DDP_DIE=`die`; returns the survivor's explanation. `dying` must exit
// with `dying_code`, the survivor non-zero (4: it caught the collective's failure), both within
// the 5 s timeout and the monitor's second.
std::string SurvivorsWords(const std::string& die, int dying, int dying_code) {
  const std::string dir = ::testing::TempDir();
  const std::string out = absl::StrCat(dir, "/die_", dying, "_", dying_code, "_");
  const int port = FreeLoopbackPort();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<int>> ranks = StartLocalRanks(
      2, port, kArgv, {"LIBKD_DDP_WORKER=1", "LIBKD_DDP_DIE=" + die, "LIBKD_DDP_OUT=" + out});
  EXPECT_THAT(ranks, IsOk());
  if (!ranks.ok()) return "";
  EXPECT_EQ(Wait((*ranks)[dying]), dying_code);  // each waited for on its own: nobody stops them
  EXPECT_EQ(Wait((*ranks)[1 - dying]), 4);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  return ReadText(absl::StrCat(out, 1 - dying, ".err"));
}

// A rank that dies after joining: the other fails within the timeout instead of hanging, and
// names the rank it lost.
TEST(DataParallelTest, ALostRankMakesTheOtherExitNonZero) {
  EXPECT_THAT(SurvivorsWords("1:-1", 1, 3),
              AllOf(HasSubstr("rank 1 of 2 was lost: its heartbeat stopped (the process died or "
                              "hangs); rank 0 stopped on: "),
                    HasSubstr("broadcasting rank 0's parameters failed")));
}

// The same in the middle of training: rank 1 dies before its backward, while rank 0's
// Reducer waits for its gradients.
TEST(DataParallelTest, ARankLostDuringBackwardIsNamed) {
  EXPECT_THAT(SurvivorsWords("1:2", 1, 3),
              StartsWith("rank 1 of 2 was lost: its heartbeat stopped (the process died or "
                         "hangs); rank 0 stopped on: "));
}

// Rank 0 serves the rendezvous store: when it dies, rank 1 names it from the store's silence.
TEST(DataParallelTest, LosingRankZeroIsNamed) {
  EXPECT_THAT(SurvivorsWords("0:2", 0, 3),
              StartsWith("rank 0 of 2 was lost: the rendezvous store it serves stopped "
                         "answering (the process died or hangs); rank 1 stopped on: "));
}

// A rank that hangs (stopped, its connections open): the other's collective times out after the
// group's 5 s, and the frozen heartbeat names it.
TEST(DataParallelTest, AHangingRankIsNamedAfterTheTimeout) {
  const std::string out = ::testing::TempDir() + "/hang_";
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<int>> ranks =
      StartLocalRanks(2, FreeLoopbackPort(), kArgv,
                      {"LIBKD_DDP_WORKER=1", "LIBKD_DDP_DIE=1:2:hangs", "LIBKD_DDP_OUT=" + out});
  ASSERT_THAT(ranks, IsOk());
  EXPECT_EQ(Wait((*ranks)[0]), 4);
  const auto waited = std::chrono::steady_clock::now() - start;
  kill((*ranks)[1], SIGKILL);
  EXPECT_EQ(Wait((*ranks)[1]), 128 + SIGKILL);
  EXPECT_GE(waited, std::chrono::seconds(5));   // the timeout, not the first error
  EXPECT_LT(waited, std::chrono::seconds(30));  // and not much more
  EXPECT_THAT(ReadText(out + "0.err"),
              StartsWith("rank 1 of 2 was lost: its heartbeat stopped (the process died or "
                         "hangs); rank 0 stopped on: "));
}

// A rank that stops on an error of its own says so: the other gives its reason.
TEST(DataParallelTest, ARankThatFailedIsNamedWithItsReason) {
  EXPECT_THAT(SurvivorsWords("1:2:failed", 1, 5),
              StartsWith("rank 1 of 2 failed: the batch of step 3 was bad; rank 0 stopped on: "));
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
  unsetenv("MASTER_PORT");
  // The environment as a whole.
  setenv("LOCAL_RANK", "-2", 1);
  EXPECT_THAT(DistributedEnvFromEnvironment(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "LOCAL_RANK=-2 is not in [0, LOCAL_WORLD_SIZE=2)"));
  unsetenv("LOCAL_RANK");
  setenv("LOCAL_WORLD_SIZE", "3", 1);
  EXPECT_THAT(DistributedEnvFromEnvironment(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "LOCAL_WORLD_SIZE=3 is not in [1, WORLD_SIZE=2]"));
  unsetenv("LOCAL_WORLD_SIZE");
  unsetenv("RANK");
  EXPECT_THAT(DistributedEnvFromEnvironment(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("WORLD_SIZE=2 without RANK: each of the processes needs its "
                                 "RANK (0..1)")));
  unsetenv("WORLD_SIZE");
  absl::StatusOr<DistributedEnv> single = DistributedEnvFromEnvironment();
  ASSERT_THAT(single, IsOk());
  EXPECT_EQ(single->world_size, 1);
  EXPECT_EQ(single->rank, 0);
}

// A rank whose master is absent fails within its deadline (+-20%), in one line naming the cause.
TEST(DataParallelTest, AnUnreachableMasterIsOneClearError) {
  DistributedEnv env{.rank = 1, .world_size = 2, .master_port = FreeLoopbackPort()};
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(InitProcessGroup(env, c10::Device(c10::kCPU), std::chrono::milliseconds(3000)),
              StatusIs(absl::StatusCode::kUnavailable,
                       absl::StrCat("rank 1 cannot reach the master at 127.0.0.1:", env.master_port,
                                    " within 3000 ms: nothing listens there (connection "
                                    "refused) (is rank 0 running? MASTER_ADDR, MASTER_PORT)")));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(seconds, 3.0 * 0.8);
  EXPECT_LE(seconds, 3.0 * 1.2);
  // A master that cannot be resolved is named at once (RFC 6761: .invalid never resolves).
  env.master_addr = "no-such-host.invalid";
  EXPECT_THAT(InitProcessGroup(env, c10::Device(c10::kCPU), std::chrono::milliseconds(3000)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("MASTER_ADDR=no-such-host.invalid cannot be resolved: ")));
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
