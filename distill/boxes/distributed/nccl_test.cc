// InitProcessGroup on a CUDA device in a binary that links //distill/boxes/distributed:nccl reaches
// libtorch's ProcessGroupNCCL. Without a GPU (this machine), NCCL's own refusal comes back as
// one Unavailable line; on a GPU machine a one-rank group allreduces a CUDA tensor.
#include <chrono>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/cuda.h>

#include "distill/boxes/distributed/ddp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::HasSubstr;

TEST(NcclTest, ACudaDeviceGetsNccl) {
  const DistributedEnv env{.master_port = FreeLoopbackPort()};
  auto group = InitProcessGroup(env, c10::Device(c10::kCUDA, 0), std::chrono::seconds(20));
#ifndef LIBKD_CUDA_HEADERS
  GTEST_SKIP() << "built without CUDA/NCCL headers: " << group.status();
#endif
  if (!torch::cuda::is_available()) {
    EXPECT_THAT(group, StatusIs(absl::StatusCode::kUnavailable,
                                HasSubstr("ProcessGroupNCCL is only supported with GPUs, no "
                                          "GPUs found!")));
    return;
  }
  ASSERT_THAT(group, IsOk());
  EXPECT_EQ((*group)->getBackendName(), "nccl");
  std::vector<at::Tensor> tensors = {at::arange(4, at::TensorOptions().device(at::kCUDA))};
  (*group)->allreduce(tensors)->wait();
  EXPECT_TRUE(tensors[0].cpu().equal(at::arange(4)));  // one rank: the sum is the tensor
  // CPU tensors still go through Gloo.
  std::vector<at::Tensor> cpu = {at::ones({3})};
  (*group)->allreduce(cpu)->wait();
  EXPECT_TRUE(cpu[0].equal(at::ones({3})));
}

}  // namespace
}  // namespace kd
