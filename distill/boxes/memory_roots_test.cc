#include "distill/boxes/memory_roots.h"

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include "distill/boxes/optim/optim.h"
#include "distill/models/model_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;

// mlp (4 -> 3 -> 2): after a step of SGD with momentum, a gradient and a momentum buffer are
// named by their paths, as is an I/O dict's value inside a list.
TEST(MemoryRootsTest, BoxRootsNameWhatTheyHold) {
  auto model = MakeRegisteredModel("mlp", {{"in_features", int64_t{4}},
                                           {"hidden", c10::List<int64_t>({3})},
                                           {"num_classes", int64_t{2}}});
  ASSERT_THAT(model, IsOk());
  std::vector<at::Tensor> params;
  for (const auto& [name, p] : (*model)->NamedParameters()) params.push_back(p);
  auto sgd = MakeOptimizer("SGD", params, {{"lr", 0.1}, {"momentum", 0.9}});
  ASSERT_THAT(sgd, IsOk());
  (*model)->Forward({at::randn({5, 4})}).toTensor().sum().backward();
  (*sgd)->step();

  IoDict io;
  const at::Tensor a = at::ones({2}), b = at::zeros({3});
  io["hidden.0"][kOutput] = c10::List<at::Tensor>({a, b});

  MemoryRoots roots;
  AddModelRoots(roots, "student", **model);
  AddOptimizerRoots(roots, "optimizer", **sgd);
  AddIoDictRoots(roots, "student_io", &io);

  at::Tensor fc_weight;
  for (const auto& [name, p] : (*model)->NamedParameters()) {
    if (name == "fc.weight") fc_weight = p;
  }
  ASSERT_TRUE(fc_weight.defined());
  EXPECT_THAT(DescribeOwners(roots, fc_weight.grad().data_ptr()),
              ElementsAre("student.fc.weight.grad (2, 3) torch.float32"));
  std::vector<std::string> paths;
  roots.Visit([&](const std::string& path, const at::Tensor&) { paths.push_back(path); });
  EXPECT_THAT(paths, Contains("optimizer.state[0].momentum_buffer"));
  EXPECT_THAT(DescribeOwners(roots, b.data_ptr()),
              ElementsAre("student_io[hidden.0].output[1] (3,) torch.float32"));
}

}  // namespace
}  // namespace kd
