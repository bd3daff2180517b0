#include "distill/boxes/aux_modules.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/container/any.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> ParameterNames(const torch::nn::AnyModule& module) {
  std::vector<std::string> names;
  for (const auto& item : module.ptr()->named_parameters()) names.push_back(item.key());
  return names;
}

// A conv connector keeps the feature map's size and maps channels (FitNet's
// regressor shape); with batch norm the conv has no bias. A linear maps the
// last dim.
TEST(AuxModulesTest, ConnectorsMapWidths) {
  auto conv = MakeAuxiliaryModule(
      "conv_connector",
      {{"in_channels", int64_t{8}}, {"out_channels", int64_t{32}}, {"kernel_size", int64_t{3}}});
  ASSERT_THAT(conv, IsOk());
  EXPECT_EQ(conv->forward(at::randn({2, 8, 5, 5})).sizes(), (std::vector<int64_t>{2, 32, 5, 5}));
  EXPECT_THAT(ParameterNames(*conv), ElementsAre("conv.weight", "bn.weight", "bn.bias"));

  auto plain = MakeAuxiliaryModule(
      "conv_connector",
      {{"in_channels", int64_t{8}}, {"out_channels", int64_t{4}}, {"batch_norm", false}});
  ASSERT_THAT(plain, IsOk());
  EXPECT_THAT(ParameterNames(*plain), ElementsAre("conv.weight", "conv.bias"));

  auto linear =
      MakeAuxiliaryModule("linear", {{"in_features", int64_t{16}}, {"out_features", int64_t{3}}});
  ASSERT_THAT(linear, IsOk());
  EXPECT_EQ(linear->forward(at::randn({5, 16})).sizes(), (std::vector<int64_t>{5, 3}));
}

TEST(AuxModulesTest, BadKwargsAreNamed) {
  EXPECT_THAT(MakeAuxiliaryModule("conv_connector", {{"in_channels", int64_t{8}},
                                                     {"out_channels", int64_t{4}},
                                                     {"kernel_size", int64_t{2}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("kernel_size must be odd")));
  EXPECT_THAT(MakeAuxiliaryModule("linear", {{"in_features", int64_t{16}}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("missing required kwarg \"out_features\"")));
}

}  // namespace
}  // namespace kd
