// memdiag's CUDA answers in a binary linked with //memdiag:cuda_memory. On a machine without a
// GPU (this project's CI) they say CUDA is not available and write nothing; on a GPU machine
// they come from libtorch's caching allocator.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/cuda.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "memdiag/inventory.h"
#include "memdiag/memory_history.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string TempPath(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / name).string();
}

#ifdef LIBKD_CUDA_BACKEND
TEST(CudaMemoryTest, BackendIsRegisteredByLinking) {
  // Not the "link //memdiag:cuda_memory" answer: the target registered itself.
  EXPECT_THAT(FormatMemoryStats(c10::Device(c10::kCUDA, 0)),
              ::testing::Not(HasSubstr("//memdiag:cuda_memory")));
}
#endif

TEST(CudaMemoryTest, WithoutAGpuNothingIsPretended) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is present";
  const std::string stats = FormatMemoryStats(c10::Device(c10::kCUDA, 0));
#ifdef LIBKD_CUDA_BACKEND
  EXPECT_EQ(stats, "CUDA not available");  // silverspoon-kd's words
#else
  EXPECT_THAT(stats, HasSubstr("link //memdiag:cuda_memory"));
#endif
  const std::string path = TempPath("no_gpu.pickle");
  RecordMemoryHistory history(path, 1000, 0, c10::Device(c10::kCUDA, 0));
  EXPECT_THAT(history.Finish(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                         HasSubstr("no CUDA memory history written to")));
  EXPECT_FALSE(std::filesystem::exists(path));
}

// On a GPU machine: the caching allocator's numbers, an unowned block, and a history snapshot
// with the viewer's keys.
TEST(CudaMemoryTest, CachingAllocatorOnAGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU here";
  const c10::Device cuda(c10::kCUDA, 0);
  const std::string path = TempPath("gpu.pickle");
  RecordMemoryHistory history(path, 1000, 0, cuda);
  at::Tensor held = at::empty({1024, 1024}, at::TensorOptions().device(cuda));  // 4 MiB
  ASSERT_THAT(history.Finish(), IsOk());

  // alloc is at least the 4 MiB held, reserved at least alloc, peak at least alloc.
  const std::string stats = FormatMemoryStats(cuda);
  double alloc = 0, reserved = 0, peak = 0;
  ASSERT_EQ(std::sscanf(stats.c_str(), "alloc=%lfGiB reserved=%lfGiB peak=%lfGiB", &alloc,
                        &reserved, &peak),
            3)
      << stats;
  EXPECT_GE(alloc * kGiB, 4.0 * 1024 * 1024 - 0.001 * kGiB);
  EXPECT_GE(reserved, alloc);
  EXPECT_GE(peak, alloc);

  // No root holds `held`: its block is unowned, of its true size.
  MemoryRoots roots;
  const StorageInventory inventory = CollectStorageInventory(roots);
  auto it = inventory.find(held.storage().data());
  ASSERT_NE(it, inventory.end());
  EXPECT_EQ(it->second.nbytes, 4 * 1024 * 1024);
  EXPECT_EQ(it->second.device_name(), "cuda:0");
  EXPECT_THAT(DescribeOwners(roots, held.storage().data()),
              ::testing::ElementsAre(MatchesRegex("unowned: 4194304 bytes on cuda:0.*")));
  roots.AddTensor("held", &held);
  EXPECT_THAT(DescribeOwners(roots, held.storage().data()),
              ::testing::ElementsAre(HasSubstr("held (1024, 1024) torch.float32")));

  std::ifstream in(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  const c10::IValue snapshot = torch::jit::pickle_load(bytes);
  ASSERT_TRUE(snapshot.isGenericDict());
  EXPECT_TRUE(snapshot.toGenericDict().contains("segments"));
  EXPECT_TRUE(snapshot.toGenericDict().contains("device_traces"));
}

}  // namespace
}  // namespace kd
