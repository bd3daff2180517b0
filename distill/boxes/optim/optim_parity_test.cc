// libkd's optimizers and schedulers against torch.optim's own, 20 steps each
// (tests/testdata/make_optim_fixtures.py records torch's values with the pinned venv).
#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>

#include "base/registry.h"
#include "distill/boxes/optim/optim.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::HasSubstr;

KD_REGISTER(LrLambdaRegistry(), "inverse_time",
            LrLambda([](int64_t e) { return 1.0 / (1 + static_cast<double>(e)); }), kAnyKwargs);

nlohmann::json Reference() {
  std::ifstream in(test::FixturePath("optim_reference.json"));
  EXPECT_TRUE(in.good());
  return in.good() ? nlohmann::json::parse(in) : nlohmann::json::object();
}

c10::IValue ToIValue(const nlohmann::json& value) {
  if (value.is_boolean()) return value.get<bool>();
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number()) return value.get<double>();
  if (value.is_string()) return value.get<std::string>();
  bool all_int = true;
  for (const nlohmann::json& v : value) all_int = all_int && v.is_number_integer();
  if (all_int) return c10::List<int64_t>(value.get<std::vector<int64_t>>());
  return c10::List<double>(value.get<std::vector<double>>());
}

Kwargs KwargsOf(const nlohmann::json& kwargs) {
  Kwargs out;
  for (const auto& [name, value] : kwargs.items()) out[name] = ToIValue(value);
  return out;
}

SchedulerSpec SpecOf(const nlohmann::json& c) {
  SchedulerSpec spec{c.at("key").get<std::string>(), KwargsOf(c.at("kwargs")), {}};
  if (c.contains("children")) {
    for (const nlohmann::json& child : c.at("children")) spec.children.push_back(SpecOf(child));
  }
  return spec;
}

// loss = sum(a * p^2 + b * sin(3 p)), the script's.
at::Tensor Loss(const at::Tensor& p) {
  const at::Tensor a = at::tensor({1.0, 2.0, 0.5, 0.1}, at::kDouble);
  const at::Tensor b = at::tensor({0.5, -1.0, 2.0, 1.0}, at::kDouble);
  return (a * p * p + b * at::sin(3 * p)).sum();
}

TEST(OptimParityTest, OptimizersStepAsTorchsForTwentySteps) {
  const nlohmann::json reference = Reference();
  ASSERT_EQ(reference.at("optimizers").size(), 8u);
  for (const nlohmann::json& c : reference.at("optimizers")) {
    SCOPED_TRACE(c.at("key").get<std::string>() + " " + c.at("kwargs").dump());
    at::Tensor p = at::tensor({1.0, -2.0, 0.5, 3.0}, at::kDouble).requires_grad_(true);
    absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> optimizer =
        MakeOptimizer(c.at("key").get<std::string>(), {p}, KwargsOf(c.at("kwargs")));
    ASSERT_THAT(optimizer, IsOk());
    int step = 0;
    for (const nlohmann::json& expected : c.at("params")) {
      (*optimizer)->zero_grad();
      Loss(p).backward();
      (*optimizer)->step();
      const std::vector<double> want = expected.get<std::vector<double>>();
      for (int i = 0; i < 4; ++i) {
        EXPECT_NEAR(p[i].item<double>(), want[i], 1e-12 * (1 + std::abs(want[i])))
            << "step " << step + 1 << ", element " << i;
      }
      ++step;
    }
  }
}

struct Groups {
  at::Tensor a = at::zeros({1}).requires_grad_(true);
  at::Tensor b = at::zeros({1}).requires_grad_(true);
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  // The script's: lr 0.1 and 0.02, SGD with momentum 0.9 or Adam.
  explicit Groups(const std::string& kind) {
    std::vector<ParamGroup> groups = {{{a}, {}}, {{b}, {{"lr", 0.02}}}};
    optimizer = kind == "Adam" ? *MakeOptimizer("Adam", groups, {{"lr", 0.1}})
                               : *MakeOptimizer("SGD", groups, {{"lr", 0.1}, {"momentum", 0.9}});
  }
  std::vector<double> Momenta() const {
    std::vector<double> out;
    for (auto& group : optimizer->param_groups()) {
      if (auto* adam = dynamic_cast<torch::optim::AdamOptions*>(&group.options())) {
        out.push_back(std::get<0>(adam->betas()));
      } else {
        out.push_back(static_cast<torch::optim::SGDOptions&>(group.options()).momentum());
      }
    }
    return out;
  }
};

void ExpectNear(const std::vector<double>& got, const nlohmann::json& want, const char* what,
                int step) {
  const std::vector<double> expected = want.get<std::vector<double>>();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t g = 0; g < got.size(); ++g) {
    EXPECT_NEAR(got[g], expected[g], 1e-12 * (1 + std::abs(expected[g])))
        << what << " of group " << g << " after " << step << " steps";
  }
}

// Each schedule's rates (and OneCycleLR's momenta) after every step as torch's; resumed from
// its state after 10 steps, it continues as torch's.
TEST(OptimParityTest, SchedulersFollowTorchsForTwentySteps) {
  const nlohmann::json reference = Reference();
  ASSERT_EQ(reference.at("schedulers").size(), 17u);
  for (const nlohmann::json& c : reference.at("schedulers")) {
    SCOPED_TRACE(c.dump().substr(0, 200));
    const std::string kind = c.at("optimizer").get<std::string>();
    Groups groups(kind);
    absl::StatusOr<std::unique_ptr<LrScheduler>> scheduler =
        MakeScheduler(SpecOf(c), *groups.optimizer);
    ASSERT_THAT(scheduler, IsOk());
    const nlohmann::json& lrs = c.at("lrs");
    const nlohmann::json& momenta = c.at("momenta");
    std::vector<double> state;
    for (size_t step = 0; step < lrs.size(); ++step) {
      if (step > 0) (*scheduler)->Step({});
      if (step == 10) state = (*scheduler)->State();
      ExpectNear(LearningRates(*groups.optimizer), lrs[step], "lr", step);
      ExpectNear(groups.Momenta(), momenta[step], "momentum", step);
    }
    Groups resumed(kind);
    absl::StatusOr<std::unique_ptr<LrScheduler>> again =
        MakeScheduler(SpecOf(c), *resumed.optimizer);
    ASSERT_THAT(again, IsOk());
    (*again)->LoadState(state);
    for (size_t step = 10; step < lrs.size(); ++step) {
      if (step > 10) (*again)->Step({});
      ExpectNear(LearningRates(*resumed.optimizer), lrs[step], "resumed lr", step);
    }
  }
}

TEST(OptimParityTest, RefusesWhatTorchRefuses) {
  Groups sgd("SGD");
  EXPECT_THAT(MakeScheduler(SchedulerSpec{"SequentialLR",
                                          {{"milestones", c10::List<int64_t>({2, 4})}},
                                          {{"ExponentialLR", {{"gamma", 0.9}}, {}}}},
                            *sgd.optimizer),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("1 schedulers need 0 milestones, not 2")));
  EXPECT_THAT(MakeScheduler(SchedulerSpec{"ChainedScheduler",
                                          {},
                                          {{"ExponentialLR", {{"gamma", 0.9}}, {}},
                                           {"LambdaLR", {{"lr_lambda", "inverse_time"}}, {}}}},
                            *sgd.optimizer),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("schedulers[1] \"LambdaLR\": torch's ChainedScheduler "
                                 "multiplies")));
  EXPECT_THAT(
      MakeScheduler(
          SchedulerSpec{"SequentialLR",
                        {{"milestones", c10::List<int64_t>({2})}},
                        {{"ExponentialLR", {{"gamma", 0.9}}, {}},
                         {"OneCycleLR", {{"max_lr", 1.0}, {"total_steps", int64_t{9}}}, {}}}},
          *sgd.optimizer),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("only schedules of the "
                                                             "epoch alone compose")));
  EXPECT_THAT(MakeScheduler(SchedulerSpec{"StepLR",
                                          {{"step_size", int64_t{2}}},
                                          {{"ExponentialLR", {{"gamma", 0.9}}, {}}}},
                            *sgd.optimizer),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("only SequentialLR and ChainedScheduler compose")));
  EXPECT_THAT(MakeScheduler("OneCycleLR", *sgd.optimizer, {{"max_lr", 1.0}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("give total_steps")));
  EXPECT_THAT(
      MakeScheduler("OneCycleLR", *sgd.optimizer,
                    {{"max_lr", c10::List<double>({1.0, 2.0, 3.0})}, {"total_steps", int64_t{9}}}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("max_lr gives 3 values for 2 parameter groups")));
  EXPECT_THAT(
      MakeScheduler("OneCycleLR", *sgd.optimizer, {{"max_lr", -1.0}, {"total_steps", int64_t{9}}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_lr must be a number")));
  at::Tensor p = at::zeros({1}).requires_grad_(true);
  std::unique_ptr<torch::optim::Optimizer> adagrad = *MakeOptimizer("Adagrad", {p}, {});
  EXPECT_THAT(MakeScheduler("OneCycleLR", *adagrad, {{"max_lr", 1.0}, {"total_steps", int64_t{9}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cycle_momentum needs")));
  EXPECT_THAT(MakeScheduler("LambdaLR", *adagrad, {{"lr_lambda", "inverse_tmie"}}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("inverse_time")));
  EXPECT_THAT(MakeOptimizer("NAdam", {p}, {}), StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace kd
