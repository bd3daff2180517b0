#include "distill/boxes/amp.h"

#include <cmath>
#include <vector>

#include <ATen/ATen.h>
#include <torch/optim/sgd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kd {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatEq;

// Inside the guard a matmul runs in the autocast dtype; outside it is fp32
// again, and nested guards restore the outer one's dtype.
TEST(AmpTest, AutocastGuardCastsWhileAlive) {
  const at::Tensor a = at::randn({4, 8}), b = at::randn({8, 3});
  {
    AutocastGuard bf16(c10::DeviceType::CPU, at::kBFloat16);
    EXPECT_EQ(at::mm(a, b).scalar_type(), at::kBFloat16);
    {
      AutocastGuard fp16(c10::DeviceType::CPU, at::kHalf);
      EXPECT_EQ(at::mm(a, b).scalar_type(), at::kHalf);
    }
    EXPECT_EQ(at::mm(a, b).scalar_type(), at::kBFloat16);
    EXPECT_EQ(at::add(a, a).scalar_type(),
              at::kFloat);  // not on autocast's lower-precision list
  }
  EXPECT_EQ(at::mm(a, b).scalar_type(), at::kFloat);
}

// torch.amp.GradScaler('cpu', init_scale=1024, growth_interval=2) with
// SGD(lr=0.1) on loss = c * sum(p), p = [1, 1], c = 3, inf, 1, 2, 0.5, recorded
// from Python (torch 2.14.1): the inf step is skipped and halves the scale; two
// finite steps in a row double it.
TEST(AmpTest, GradScalerMatchesTorchsGradScaler) {
  at::Tensor p = at::ones({2}).requires_grad_(true);
  torch::optim::SGD sgd({p}, torch::optim::SGDOptions(0.1));
  GradScaler scaler(c10::Device(c10::kCPU), {.init_scale = 1024, .growth_interval = 2});
  const std::vector<std::vector<float>> expected_p = {
      {0.7f, 0.7f}, {0.7f, 0.7f}, {0.6f, 0.6f}, {0.4f, 0.4f}, {0.35f, 0.35f}};
  const std::vector<double> expected_scale = {1024, 512, 512, 1024, 1024};
  const std::vector<double> expected_tracker = {1, 0, 1, 0, 1};
  const std::vector<double> c = {3, INFINITY, 1, 2, 0.5};
  for (size_t k = 0; k < c.size(); ++k) {
    sgd.zero_grad();
    const at::Tensor loss =
        std::isinf(c[k]) ? (p * at::tensor({1.0f, INFINITY})).sum() : (c[k] * p).sum();
    scaler.Scale(loss).backward();
    EXPECT_EQ(scaler.Step(sgd), !std::isinf(c[k])) << k;
    scaler.Update();
    const at::Tensor now = p.detach();
    EXPECT_THAT(std::vector<float>(now.data_ptr<float>(), now.data_ptr<float>() + 2),
                ElementsAre(FloatEq(expected_p[k][0]), FloatEq(expected_p[k][1])))
        << k;
    EXPECT_THAT(scaler.State(), ElementsAre(expected_scale[k], expected_tracker[k])) << k;
  }

  // Unscale before clipping: the gradients are the true ones, and Step does not
  // unscale twice.
  sgd.zero_grad();
  scaler.Scale((3 * p).sum()).backward();
  scaler.Unscale(sgd);
  EXPECT_TRUE(at::allclose(p.grad(), at::full({2}, 3.0f)));
  scaler.Unscale(sgd);
  EXPECT_TRUE(at::allclose(p.grad(), at::full({2}, 3.0f)));

  // State round-trips.
  GradScaler restored(c10::Device(c10::kCPU));
  restored.LoadState({512, 7});
  EXPECT_EQ(restored.scale(), 512);
  EXPECT_THAT(restored.State(), ElementsAre(512, 7));
}

}  // namespace
}  // namespace kd
