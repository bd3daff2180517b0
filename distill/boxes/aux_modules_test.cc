#include "distill/boxes/aux_modules.h"

#include <string>
#include <tuple>
#include <vector>

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

namespace kd {
namespace {

// torchdistill's Regressor4VID: its parameter names, a mean of the teacher's channels and a
// variance that starts at init_pred_var (softplus of softplus^-1(init - eps), plus eps).
TEST(MethodModulesTest, VidsRegressorStartsAtItsInitialVariance) {
  auto regressor = MakeAuxiliaryModule("Regressor4VID", {{"in_channels", int64_t{4}},
                                                         {"middle_channels", int64_t{6}},
                                                         {"out_channels", int64_t{8}},
                                                         {"eps", 1e-5},
                                                         {"init_pred_var", 5.0}});
  ASSERT_THAT(regressor, IsOk());
  EXPECT_THAT(ParameterNames(*regressor),
              ElementsAre("soft_plus_param", "regressor.0.weight", "regressor.2.weight",
                          "regressor.4.weight"));
  torch::nn::AnyValue out = regressor->any_forward(at::randn({2, 4, 5, 5}));
  const auto* pair = out.try_get<std::tuple<at::Tensor, at::Tensor>>();
  ASSERT_NE(pair, nullptr);
  EXPECT_EQ(std::get<0>(*pair).sizes(), (std::vector<int64_t>{2, 8, 5, 5}));
  EXPECT_EQ(std::get<1>(*pair).sizes(), (std::vector<int64_t>{1, 8, 1, 1}));
  EXPECT_TRUE(at::allclose(std::get<1>(*pair), at::full({1, 8, 1, 1}, 5.0), 1e-6, 1e-6));
  EXPECT_THAT(MakeAuxiliaryModule("Regressor4VID", {{"in_channels", int64_t{4}},
                                                    {"middle_channels", int64_t{6}},
                                                    {"out_channels", int64_t{8}},
                                                    {"eps", 1.0},
                                                    {"init_pred_var", 0.5}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must exceed eps")));
}

// PAD's variance branch: Linear + BatchNorm1d on the flattened embedding, under the wrapper's
// attribute name.
TEST(MethodModulesTest, PadsVarianceBranchEstimatesOneLogVariancePerDimension) {
  auto branch = MakeAuxiliaryModule("VarianceBranch4PAD", {{"feat_dim", int64_t{12}}});
  ASSERT_THAT(branch, IsOk());
  EXPECT_THAT(ParameterNames(*branch),
              ElementsAre("var_estimator.0.weight", "var_estimator.0.bias",
                          "var_estimator.1.weight", "var_estimator.1.bias"));
  EXPECT_EQ(branch->forward(at::randn({3, 3, 2, 2})).sizes(), (std::vector<int64_t>{3, 12}));
}

// CRD's and CCKD's embeddings and ICKD's: torchdistill's parameter names; CRD's rows have unit
// L2 norm; CCKD's is the linear of the flattened value.
TEST(MethodModulesTest, EmbeddingsOfCrdCckdAndIckd) {
  auto crd = MakeAuxiliaryModule("Linear4CRD",
                                 {{"in_features", int64_t{12}}, {"out_features", int64_t{5}}});
  ASSERT_THAT(crd, IsOk());
  EXPECT_THAT(ParameterNames(*crd), ElementsAre("linear.weight", "linear.bias"));
  const at::Tensor embedded = crd->forward(at::randn({3, 3, 2, 2}));
  EXPECT_EQ(embedded.sizes(), (std::vector<int64_t>{3, 5}));
  EXPECT_TRUE(at::allclose(embedded.norm(2, 1), at::ones({3}), 1e-6, 1e-6));

  auto cckd = MakeAuxiliaryModule("Linear4CCKD",
                                  {{"in_features", int64_t{12}}, {"out_features", int64_t{4}}});
  ASSERT_THAT(cckd, IsOk());
  const at::Tensor x = at::randn({3, 3, 2, 2});
  const auto params = cckd->ptr()->named_parameters();
  EXPECT_TRUE(at::allclose(cckd->forward(x),
                           at::linear(x.flatten(1), params["linear.weight"], params["linear.bias"])));

  auto ickd = MakeAuxiliaryModule("ChannelSimilarityEmbed",
                                  {{"in_channels", int64_t{6}}, {"out_channels", int64_t{4}}});
  ASSERT_THAT(ickd, IsOk());
  EXPECT_THAT(ParameterNames(*ickd), ElementsAre("conv2d.weight", "l2norm.weight", "l2norm.bias"));
  EXPECT_EQ(ickd->forward(at::randn({2, 6, 5, 5})).sizes(), (std::vector<int64_t>{2, 4, 5, 5}));
}

// Factor transfer's paraphraser (encoder and transposed-convolution decoder) and translator, as
// torchdistill names their tensors: the reconstruction keeps the map's shape, the factor has
// k times its channels.
TEST(MethodModulesTest, FactorTransfersParaphraserAndTranslator) {
  auto reconstruct = MakeAuxiliaryModule(
      "Paraphraser4FactorTransfer", {{"k", 0.5}, {"num_input_channels", int64_t{8}}});
  ASSERT_THAT(reconstruct, IsOk());
  EXPECT_EQ(reconstruct->forward(at::randn({2, 8, 5, 5})).sizes(),
            (std::vector<int64_t>{2, 8, 5, 5}));
  const std::vector<std::string> names = ParameterNames(*reconstruct);
  ASSERT_EQ(names.size(), 24u);  // 6 convolutions and 6 batch norms, weight and bias each
  EXPECT_EQ(names[0], "encoder.0.weight");
  EXPECT_EQ(names[2], "encoder.1.weight");  // the batch norm (LeakyReLU has none)
  EXPECT_EQ(names[4], "encoder.3.weight");
  EXPECT_EQ(names[12], "decoder.0.weight");
  auto factor = MakeAuxiliaryModule(
      "Paraphraser4FactorTransfer",
      {{"k", 0.5}, {"num_input_channels", int64_t{8}}, {"uses_decoder", false}});
  ASSERT_THAT(factor, IsOk());
  EXPECT_EQ(factor->forward(at::randn({2, 8, 5, 5})).sizes(), (std::vector<int64_t>{2, 4, 5, 5}));

  auto translator = MakeAuxiliaryModule(
      "Translator4FactorTransfer",
      {{"num_input_channels", int64_t{4}}, {"num_output_channels", int64_t{6}}, {"uses_bn", false}});
  ASSERT_THAT(translator, IsOk());
  EXPECT_THAT(ParameterNames(*translator), ElementsAre("0.weight", "0.bias", "2.weight", "2.bias",
                                                       "4.weight", "4.bias"));
  EXPECT_EQ(translator->forward(at::randn({2, 4, 5, 5})).sizes(),
            (std::vector<int64_t>{2, 6, 5, 5}));
}

}  // namespace
}  // namespace kd
