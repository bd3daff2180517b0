// CompositeOptimizer: an SGD with momentum and an AdamW stepped as one equal the two stepped
// apart, under one learning-rate schedule; its saved state resumes both exactly.
#include "distill/boxes/optim/composite_optimizer.h"

#include <sstream>
#include <vector>

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>

#include "distill/boxes/optim/optim.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

struct Params {
  at::Tensor a, b;
};

Params MakeParams() {
  at::manual_seed(3);
  return {at::randn({4, 3}).requires_grad_(), at::randn({5}).requires_grad_()};
}

// A loss whose gradients reach both tensors, different each step.
void Backward(const Params& p, int step) {
  const at::Tensor x = at::full({3}, 0.1 * (step + 1));
  ((p.a.matmul(x) - 1).pow(2).sum() + (p.b * (step % 3 + 1)).sin().sum()).backward();
}

std::unique_ptr<torch::optim::Optimizer> Sgd(const at::Tensor& t) {
  return std::make_unique<torch::optim::SGD>(std::vector<at::Tensor>{t},
                                             torch::optim::SGDOptions(0.1).momentum(0.9));
}
std::unique_ptr<torch::optim::Optimizer> AdamW(const at::Tensor& t) {
  return std::make_unique<torch::optim::AdamW>(std::vector<at::Tensor>{t},
                                               torch::optim::AdamWOptions(0.01));
}

std::unique_ptr<CompositeOptimizer> Composite(const Params& p) {
  std::vector<CompositeOptimizer::Child> children;
  children.push_back({"student", Sgd(p.a)});
  children.push_back({"projectors", AdamW(p.b)});
  return std::make_unique<CompositeOptimizer>(std::move(children));
}

TEST(CompositeOptimizerTest, StepsItsChildrenAsOneUnderOneSchedule) {
  // Apart: each optimizer stepped by hand, the learning rates halved every 5 steps.
  Params apart = MakeParams();
  auto sgd = Sgd(apart.a), adamw = AdamW(apart.b);
  for (int step = 0; step < 20; ++step) {
    const double factor = std::pow(0.5, step / 5);
    sgd->param_groups()[0].options().set_lr(0.1 * factor);
    adamw->param_groups()[0].options().set_lr(0.01 * factor);
    sgd->zero_grad();
    adamw->zero_grad();
    Backward(apart, step);
    sgd->step();
    adamw->step();
  }
  // As one, with libkd's StepLR over the composite; resumed from its state after 10 steps.
  Params together = MakeParams();
  auto composite = Composite(together);
  absl::StatusOr<std::unique_ptr<LrScheduler>> schedule =
      MakeScheduler("StepLR", *composite, {{"step_size", int64_t{5}}, {"gamma", 0.5}});
  ASSERT_THAT(schedule, IsOk());
  std::ostringstream saved;
  std::vector<double> schedule_state;
  for (int step = 0; step < 10; ++step) {
    composite->zero_grad();
    Backward(together, step);
    composite->step();
    (*schedule)->Step({});
  }
  torch::serialize::OutputArchive archive;
  composite->save(archive);
  archive.save_to(saved);
  schedule_state = (*schedule)->State();
  // A fresh composite over the same tensors, its state loaded.
  auto resumed = Composite(together);
  std::istringstream in(saved.str());
  torch::serialize::InputArchive input;
  input.load_from(in);
  resumed->load(input);
  absl::StatusOr<std::unique_ptr<LrScheduler>> resumed_schedule =
      MakeScheduler("StepLR", *resumed, {{"step_size", int64_t{5}}, {"gamma", 0.5}});
  ASSERT_THAT(resumed_schedule, IsOk());
  (*resumed_schedule)->LoadState(schedule_state);
  for (int step = 10; step < 20; ++step) {
    resumed->zero_grad();
    Backward(together, step);
    resumed->step();
    (*resumed_schedule)->Step({});
  }
  EXPECT_TRUE(at::allclose(together.a, apart.a, 1e-6, 1e-7));
  EXPECT_TRUE(at::allclose(together.b, apart.b, 1e-6, 1e-7));
  EXPECT_FALSE(at::allclose(together.a, MakeParams().a));  // it trained
  EXPECT_EQ(OptimizerKind(*resumed), "CompositeOptimizer(student: SGD, projectors: AdamW)");
  EXPECT_EQ(ParamGroupSizes(*resumed), (std::vector<int64_t>{1, 1}));
}

}  // namespace
}  // namespace kd
