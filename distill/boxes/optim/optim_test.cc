#include "distill/boxes/optim/optim.h"

#include <cmath>
#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::AllOf;
using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Fixture {
  at::Tensor p = at::ones({1}).requires_grad_(true);
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  explicit Fixture(double lr, Kwargs more = {}) {
    more["lr"] = lr;
    optimizer = *MakeOptimizer("SGD", {p}, more);
  }
};

// The learning rate after each of `steps` epoch-wise steps, starting with the initial one.
std::vector<double> Rates(LrScheduler& scheduler, torch::optim::Optimizer& optimizer, int steps) {
  std::vector<double> out = {LearningRates(optimizer)[0]};
  for (int i = 0; i < steps; ++i) {
    scheduler.Step({});
    out.push_back(LearningRates(optimizer)[0]);
  }
  return out;
}

// SGD with momentum, by hand: loss 2p, so the gradient is 2; buf = 0.9 buf + g; p -= lr buf.
TEST(OptimTest, SgdWithMomentumStepsAsTorchDoes) {
  Fixture f(0.1, {{"momentum", 0.9}});
  for (double expected : {0.8, 0.42}) {
    f.optimizer->zero_grad();
    (2 * f.p).sum().backward();
    f.optimizer->step();
    EXPECT_NEAR(f.p.item<double>(), expected, 1e-6);
  }
  EXPECT_THAT(MakeOptimizer("SGD", {f.p}, {{"lr", 0.1}, {"nesterov", true}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nesterov needs")));
  EXPECT_THAT(MakeOptimizer("SDG", {f.p}, {{"lr", 0.1}}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("did you mean \"SGD\"?")));
  EXPECT_THAT(MakeOptimizer("Adam", {f.p}, {{"lr", -1.0}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be in (0, inf]")));
}

// torch.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.01}], lr=0.1): the
// second group's lr overrides the optimizer's; each group steps at its own rate
// (gradient 2: a 1 -> 0.8, b 1 -> 0.98), and a scheduler scales each group's
// own rate.
TEST(OptimTest, ParamGroupsOverrideTheOptimizersKwargs) {
  at::Tensor a = at::ones({1}).requires_grad_(true);
  at::Tensor b = at::ones({1}).requires_grad_(true);
  std::unique_ptr<torch::optim::Optimizer> sgd =
      *MakeOptimizer("SGD", std::vector<ParamGroup>{{{a}, {}}, {{b}, {{"lr", 0.01}}}},
                     {{"lr", 0.1}, {"momentum", 0.9}});
  EXPECT_THAT(LearningRates(*sgd), ElementsAre(0.1, 0.01));
  (2 * a + 2 * b).sum().backward();
  sgd->step();
  EXPECT_NEAR(a.item<double>(), 0.8, 1e-6);
  EXPECT_NEAR(b.item<double>(), 0.98, 1e-6);
  auto steps = *MakeScheduler("StepLR", *sgd, {{"step_size", int64_t{1}}, {"gamma", 0.5}});
  steps->Step({});
  EXPECT_THAT(LearningRates(*sgd), ElementsAre(DoubleNear(0.05, 1e-12), DoubleNear(0.005, 1e-12)));

  EXPECT_THAT(MakeOptimizer("SGD", std::vector<ParamGroup>{{{a}, {}}, {{b, a}, {}}}, {{"lr", 0.1}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("parameter group 1: a parameter is also in group 0")));
  EXPECT_THAT(MakeOptimizer("SGD", std::vector<ParamGroup>{{{a}, {}}, {{}, {}}}, {{"lr", 0.1}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("parameter group 1: no trainable parameters")));
  EXPECT_THAT(MakeOptimizer("Adam", std::vector<ParamGroup>{{{a}, {}}, {{b}, {{"lr", -1.0}}}}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("parameter group 1"), HasSubstr("must be in (0, inf]"))));
}

// torch.optim.lr_scheduler's values, worked out by hand.
TEST(OptimTest, SchedulersFollowTorchsSchedules) {
  Fixture multi(0.1);
  auto steps = *MakeScheduler("MultiStepLR", *multi.optimizer,
                              {{"milestones", c10::List<int64_t>({2, 4})}, {"gamma", 0.1}});
  EXPECT_THAT(
      Rates(*steps, *multi.optimizer, 5),
      ElementsAre(DoubleNear(0.1, 1e-12), DoubleNear(0.1, 1e-12), DoubleNear(0.01, 1e-12),
                  DoubleNear(0.01, 1e-12), DoubleNear(0.001, 1e-12), DoubleNear(0.001, 1e-12)));
  Fixture cosine(1.0);
  auto cos = *MakeScheduler("CosineAnnealingLR", *cosine.optimizer, {{"T_max", int64_t{4}}});
  EXPECT_THAT(Rates(*cos, *cosine.optimizer, 4),
              ElementsAre(DoubleNear(1, 1e-12), DoubleNear((1 + std::sqrt(0.5)) / 2, 1e-12),
                          DoubleNear(0.5, 1e-12), DoubleNear((1 - std::sqrt(0.5)) / 2, 1e-12),
                          DoubleNear(0, 1e-12)));
  Fixture warm(1.0);
  auto linear = *MakeScheduler("LinearLR", *warm.optimizer,
                               {{"start_factor", 0.5}, {"total_iters", int64_t{2}}});
  EXPECT_THAT(Rates(*linear, *warm.optimizer, 3),
              ElementsAre(DoubleNear(0.5, 1e-12), DoubleNear(0.75, 1e-12), DoubleNear(1, 1e-12),
                          DoubleNear(1, 1e-12)));
  Fixture step(1.0);
  auto by_step = *MakeScheduler("StepLR", *step.optimizer, {{"step_size", int64_t{2}}});
  EXPECT_THAT(Rates(*by_step, *step.optimizer, 3),
              ElementsAre(DoubleNear(1, 1e-12), DoubleNear(1, 1e-12), DoubleNear(0.1, 1e-12),
                          DoubleNear(0.1, 1e-12)));
  EXPECT_THAT(MakeScheduler("MultiStepLR", *step.optimizer, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("missing required kwarg \"milestones\"")));
}

// Plateau: with patience 1, the rate halves after two epochs without improvement; the state
// round-trips (a resumed run continues the same schedule).
TEST(OptimTest, PlateauReducesAfterPatienceAndItsStateRoundTrips) {
  Fixture f(1.0);
  auto plateau = *MakeScheduler("ReduceLROnPlateau", *f.optimizer,
                                {{"factor", 0.5}, {"patience", int64_t{1}}});
  plateau->Step({.metric = 1.0});
  plateau->Step({.metric = 1.0});
  EXPECT_EQ(LearningRates(*f.optimizer)[0], 1.0);
  const std::vector<double> state = plateau->State();
  plateau->Step({.metric = 1.0});
  EXPECT_EQ(LearningRates(*f.optimizer)[0], 0.5);
  plateau->Step({});  // no metric: nothing to judge
  EXPECT_EQ(LearningRates(*f.optimizer)[0], 0.5);

  Fixture g(1.0);
  auto resumed = *MakeScheduler("ReduceLROnPlateau", *g.optimizer,
                                {{"factor", 0.5}, {"patience", int64_t{1}}});
  resumed->LoadState(state);
  resumed->Step({.metric = 1.0});
  EXPECT_EQ(LearningRates(*g.optimizer)[0], 0.5);
}

}  // namespace
}  // namespace kd
