#include "distill/boxes/aux_modules.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/modules/container/any.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/kwargs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace {

using ::kd::test::At;
using ::kd::test::IValueNear;
using ::kd::test::LoadExpected;
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

// PAD's variance branch: Linear + BatchNorm1d on the flattened embedding, named as its
// var_estimator_ckpt holds them.
TEST(MethodModulesTest, PadsVarianceBranchEstimatesOneLogVariancePerDimension) {
  auto branch = MakeAuxiliaryModule("VarianceBranch4PAD", {{"feat_dim", int64_t{12}}});
  ASSERT_THAT(branch, IsOk());
  EXPECT_THAT(ParameterNames(*branch),
              ElementsAre("0.weight", "0.bias", "1.weight", "1.bias"));
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


// Relative 1e-5 of the expected values' scale.
double Tolerance(const at::Tensor& expected) {
  return 1e-6 + 1e-5 * expected.abs().max().item<double>();
}

Kwargs KwargsOf(const c10::IValue& dict) {
  Kwargs kwargs;
  for (const auto& entry : dict.toGenericDict()) {
    kwargs.emplace(entry.key().toStringRef(), entry.value());
  }
  return kwargs;
}

// Copies `state` (libkd names, under `prefix`) into `module`'s parameters and buffers; every
// name must exist and every tensor of the module be given.
void LoadState(const torch::nn::AnyModule& module, const c10::IValue& state,
               const std::string& prefix = "") {
  size_t loaded = 0;
  const auto params = module.ptr()->named_parameters();
  const auto buffers = module.ptr()->named_buffers();
  at::NoGradGuard no_grad;
  for (const auto& entry : state.toGenericDict()) {
    const std::string& name = entry.key().toStringRef();
    if (!absl::StartsWith(name, prefix)) continue;
    const std::string own = name.substr(prefix.size());
    const at::Tensor* target = params.find(own);
    if (target == nullptr) target = buffers.find(own);
    ASSERT_NE(target, nullptr) << name;
    ASSERT_EQ(target->sizes(), entry.value().toTensor().sizes()) << name;
    const_cast<at::Tensor*>(target)->copy_(entry.value().toTensor());
    ++loaded;
  }
  EXPECT_EQ(loaded, params.size() + buffers.size());
}

// The outputs of a module's forward: a tensor, or a pair's two.
std::vector<at::Tensor> Outputs(torch::nn::AnyValue value) {
  if (const at::Tensor* t = value.try_get<at::Tensor>()) return {*t};
  const auto& pair = *value.try_get<std::tuple<at::Tensor, at::Tensor>>();
  return {std::get<0>(pair), std::get<1>(pair)};
}

// Checks outputs, input and parameter gradients and batch-norm statistics after the call
// against what torchdistill's module recorded (`c`), the backward of sum(output * weight).
void ExpectLikeThePeer(const c10::IValue& c, const std::vector<at::Tensor>& inputs,
                       const std::vector<at::Tensor>& outputs,
                       const std::vector<torch::nn::AnyModule>& modules,
                       const std::vector<std::string>& prefixes) {
  const auto& expected = At(c, "outputs").toListRef();
  const auto& weights = At(c, "weights").toListRef();
  ASSERT_EQ(outputs.size(), expected.size());
  at::Tensor sum = at::zeros({});
  for (size_t i = 0; i < outputs.size(); ++i) {
    const at::Tensor want = expected[i].toTensor();
    EXPECT_THAT(c10::IValue(outputs[i]), IValueNear(want, Tolerance(want))) << "output " << i;
    sum = sum + (outputs[i] * weights[i].toTensor()).sum();
  }
  sum.backward();
  const auto& input_grads = At(c, "input_grads").toListRef();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor want = input_grads[i].toTensor();
    EXPECT_THAT(c10::IValue(inputs[i].grad()), IValueNear(want, Tolerance(want))) << "input " << i;
  }
  std::map<std::string, at::Tensor> grads, buffers;
  for (size_t m = 0; m < modules.size(); ++m) {
    for (const auto& item : modules[m].ptr()->named_parameters()) {
      if (item.value().grad().defined()) grads[prefixes[m] + item.key()] = item.value().grad();
    }
    for (const auto& item : modules[m].ptr()->named_buffers()) {
      buffers[prefixes[m] + item.key()] = item.value();
    }
  }
  // A gradient's error is rounding on the scale of the backward, not of the gradient itself: a
  // bias before a batch norm has a gradient of exactly 0 in exact arithmetic, and what both
  // libraries compute for it is noise of the size of the other gradients' rounding (up to
  // 1.4e-5 apart on a machine whose kernels round differently from the fixture's). So
  // gradients are compared at 1e-5 of the largest gradient of the case.
  double grad_scale = 0;
  for (const auto& entry : At(c, "param_grads").toGenericDict()) {
    grad_scale = std::max(grad_scale, entry.value().toTensor().abs().max().item<double>());
  }
  for (const auto& [what, dict, actual] :
       {std::tuple{"gradient", "param_grads", &grads}, {"buffer", "buffers_after", &buffers}}) {
    EXPECT_EQ(actual->size(), At(c, dict).toGenericDict().size()) << what;
    for (const auto& entry : At(c, dict).toGenericDict()) {
      const std::string& name = entry.key().toStringRef();
      ASSERT_EQ(actual->count(name), 1u) << what << " " << name;
      const at::Tensor want = entry.value().toTensor();
      const double tolerance = std::string(what) == "gradient"
                                   ? std::max(Tolerance(want), 1e-5 * grad_scale)
                                   : Tolerance(want);
      EXPECT_THAT(c10::IValue(actual->at(name)), IValueNear(want, tolerance))
          << what << " " << name << " (largest gradient of the case " << grad_scale << ")";
    }
  }
}

std::vector<at::Tensor> InputsOf(const c10::IValue& c) {
  std::vector<at::Tensor> inputs;
  for (const c10::IValue& x : At(c, "inputs").toListRef()) {
    inputs.push_back(x.toTensor().clone().requires_grad_(true));
  }
  return inputs;
}

// Every method module against torchdistill's own (tests/testdata/make_module_fixtures.py: its
// classes, through their wrappers' secondary_forward where they live in one, in train mode):
// built from the same kwargs, loaded with the same weights under the names torchdistill's
// module checkpoints hold, the outputs, the gradients of the inputs and of every parameter,
// and the batch-norm statistics after the call, at relative 1e-5.
TEST(MethodModulesTest, EqualTorchdistillsModules) {
  const c10::IValue cases = LoadExpected("modules");
  std::set<std::string> keys;
  for (const c10::IValue& c : cases.toTupleRef().elements()) {
    const std::string key = At(c, "key").toStringRef();
    keys.insert(key);
    SCOPED_TRACE(key);
    std::vector<at::Tensor> inputs = InputsOf(c);
    if (key == "Student4KnowledgeReview") continue;  // the chain: below
    auto module = MakeAuxiliaryModule(key, KwargsOf(At(c, "kwargs")));
    ASSERT_THAT(module, IsOk());
    LoadState(*module, At(c, "state"));
    module->ptr()->train();
    const torch::nn::AnyValue out = inputs.size() == 1
                                        ? module->any_forward(inputs[0])
                                        : module->any_forward(inputs[0], inputs[1]);
    ExpectLikeThePeer(c, inputs, Outputs(out), {*module}, {""});
  }
  EXPECT_EQ(keys,
            (std::set<std::string>{"AffinityAdapter4KTAAD", "AttentionBasedFusion",
                                   "ChannelSimilarityEmbed", "Connector4DAB", "ConvReg",
                                   "FeatureAdapter4KTAAD", "Linear4CCKD", "Linear4CRD",
                                   "Paraphraser4FactorTransfer", "Regressor4VID",
                                   "SRDModelWrapper", "SSWrapper4SSKD", "Student4KnowledgeReview",
                                   "Translator4FactorTransfer", "VarianceBranch4PAD"}));
}

// Knowledge review's chain as torchdistill's Student4KnowledgeReview runs it: the deepest
// fusion on its map, the next on its own map and the first one's residual; outputs and
// gradients through the chain.
TEST(MethodModulesTest, KnowledgeReviewsChainEqualsTorchdistills) {
  const c10::IValue cases = LoadExpected("modules");
  for (const c10::IValue& c : cases.toTupleRef().elements()) {
    if (At(c, "key").toStringRef() != "Student4KnowledgeReview") continue;
    std::vector<torch::nn::AnyModule> modules;
    const auto& chain = At(c, "chain").toListRef();
    for (size_t i = 0; i < chain.size(); ++i) {
      auto module = MakeAuxiliaryModule("AttentionBasedFusion", KwargsOf(chain[i]));
      ASSERT_THAT(module, IsOk());
      LoadState(*module, At(c, "state"), absl::StrCat(i, "."));
      modules.push_back(*std::move(module));
    }
    std::vector<at::Tensor> inputs = InputsOf(c);
    std::vector<at::Tensor> outputs = Outputs(modules[0].any_forward(inputs[0]));
    const std::vector<at::Tensor> next = Outputs(modules[1].any_forward(inputs[1], outputs[1]));
    outputs.insert(outputs.end(), next.begin(), next.end());
    ExpectLikeThePeer(c, inputs, outputs, modules, {"0.", "1."});
    return;
  }
  FAIL() << "no Student4KnowledgeReview case in modules.expected.pt";
}

// A fusion with attention needs the residual; the deepest takes none.
TEST(MethodModulesTest, AFusionsInputsMatchItsAttention) {
  auto attending = MakeAuxiliaryModule("AttentionBasedFusion", {{"in_channels", int64_t{4}},
                                                                {"mid_channels", int64_t{6}},
                                                                {"out_channels", int64_t{5}},
                                                                {"uses_attention", true}});
  ASSERT_THAT(attending, IsOk());
  EXPECT_THAT([&] { attending->any_forward(at::randn({2, 4, 4, 4})); },
              ::testing::ThrowsMessage<c10::Error>(HasSubstr("extra_inputs")));
  auto deepest = MakeAuxiliaryModule(
      "AttentionBasedFusion",
      {{"in_channels", int64_t{4}}, {"mid_channels", int64_t{6}}, {"out_channels", int64_t{5}}});
  ASSERT_THAT(deepest, IsOk());
  EXPECT_THAT([&] { deepest->any_forward(at::randn({2, 4, 4, 4}), at::randn({2, 6, 2, 2})); },
              ::testing::ThrowsMessage<c10::Error>(HasSubstr("uses_attention: true")));
}

}  // namespace
}  // namespace kd
