// FuseProjectorsIntoModule against silverspoon-kd's fuse_projectors_into_module on the same
// modules (tests/testdata/make_projector_fusion_fixtures.py, float64): the fused parameters equal
// its, and the fused module computes what the chain output projector -> input projector ->
// module computed (its recorded output), border pixels of a zero-padded convolution with fused
// projector biases excepted (silverspoon-kd's documented caveat, checked here to be only that).
#include "distill/boxes/projector_fusion.h"

#include <map>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "base/torch_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::HasSubstr;

class ProjectorFusionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<c10::IValue> saved =
        ReadTorchFile(test::FixturePath("feature_kd/projector_fusion.pt"));
    ASSERT_THAT(saved, IsOk());
    for (const auto& entry : saved->toGenericDict()) {
      (*saved_)[entry.key().toStringRef()] = entry.value().toTensor();
    }
  }
  static void TearDownTestSuite() { saved_->clear(); }

  static at::Tensor Get(const std::string& key) {
    auto it = saved_->find(key);
    return it == saved_->end() ? at::Tensor() : it->second;
  }

  // The recorded parameters of `part` loaded into `module`.
  template <typename M>
  static void Load(M& module, const std::string& case_name, const std::string& part) {
    torch::NoGradGuard no_grad;
    module->weight.copy_(Get(case_name + "." + part + ".weight"));
    if (module->bias.defined()) module->bias.copy_(Get(case_name + "." + part + ".bias"));
  }

  // Checks the fused module's parameters and output against the recorded ones; `interior`
  // crops a convolution's output before comparing with the chain's.
  static void ExpectFused(const std::shared_ptr<torch::nn::Module>& fused,
                          const std::string& case_name, int64_t border = 0) {
    const at::Tensor weight = Get(case_name + ".fused.weight");
    const at::Tensor bias = Get(case_name + ".fused.bias");
    auto params = fused->named_parameters(/*recurse=*/false);
    ASSERT_TRUE(params.contains("weight"));
    EXPECT_TRUE(params["weight"].allclose(weight, 0, 1e-12)) << case_name;
    EXPECT_EQ(params["weight"].sizes(), weight.sizes());
    if (bias.defined()) {
      ASSERT_TRUE(params.contains("bias") && params["bias"].defined()) << case_name;
      EXPECT_TRUE(params["bias"].allclose(bias, 0, 1e-12)) << case_name;
    } else {
      EXPECT_FALSE(params.contains("bias") && params["bias"].defined()) << case_name;
    }
    const at::Tensor x = Get(case_name + ".x");
    at::Tensor y = Get(case_name + ".y");
    at::Tensor got;
    if (auto* linear = dynamic_cast<torch::nn::LinearImpl*>(fused.get())) {
      got = linear->forward(x);
    } else {
      got = dynamic_cast<torch::nn::Conv2dImpl*>(fused.get())->forward(x);
    }
    ASSERT_EQ(got.sizes(), y.sizes()) << case_name;
    if (border > 0) {
      using torch::indexing::Slice;
      auto crop = [border](const at::Tensor& t) {
        return t.index({Slice(), Slice(), Slice(border, -border), Slice(border, -border)});
      };
      EXPECT_TRUE(crop(got).allclose(crop(y), 0, 1e-12)) << case_name;
      EXPECT_FALSE(got.allclose(y, 0, 1e-6)) << case_name << ": the border differs";
    } else {
      EXPECT_TRUE(got.allclose(y, 0, 1e-12)) << case_name;
    }
  }

  static std::map<std::string, at::Tensor>* saved_;
};

std::map<std::string, at::Tensor>* ProjectorFusionTest::saved_ =
    new std::map<std::string, at::Tensor>();

// The fixture's Linear cases: module Linear(8, 6), input projector 5 -> 8, output projector 4 ->
// (5 or 8).
struct LinearParts {
  torch::nn::Linear module{nullptr}, input{nullptr}, output{nullptr};
};

TEST_F(ProjectorFusionTest, LinearCasesEqualSilverspoonKd) {
  struct Case {
    std::string name;
    bool module_bias;
    int input;  // -1 none, else bias flag
    int output;
  };
  for (const Case& c :
       {Case{"linear_both", true, 1, 1}, Case{"linear_input_only_no_bias", true, 0, -1},
        Case{"linear_output_only", false, -1, 1}, Case{"linear_no_biases", false, 0, 0}}) {
    torch::nn::Linear module(torch::nn::LinearOptions(8, 6).bias(c.module_bias));
    module->to(torch::kFloat64);
    Load(module, c.name, "module");
    ProjectorsToFuse projectors;
    if (c.input >= 0) {
      torch::nn::Linear p(torch::nn::LinearOptions(5, 8).bias(c.input == 1));
      p->to(torch::kFloat64);
      Load(p, c.name, "input_projector");
      projectors.input_projector = p.ptr();
    }
    if (c.output >= 0) {
      torch::nn::Linear p(torch::nn::LinearOptions(4, c.input >= 0 ? 5 : 8).bias(c.output == 1));
      p->to(torch::kFloat64);
      Load(p, c.name, "output_projector");
      projectors.output_projector = p.ptr();
    }
    const at::Tensor before = module->weight.clone();
    absl::StatusOr<std::shared_ptr<torch::nn::Module>> fused =
        FuseProjectorsIntoModule(module.ptr(), projectors);
    ASSERT_THAT(fused, IsOk()) << c.name;
    EXPECT_NE(fused->get(), module.get());
    EXPECT_TRUE(module->weight.equal(before)) << "the module itself is left as it was";
    ExpectFused(*fused, c.name);
  }
}

TEST_F(ProjectorFusionTest, Conv2dCasesEqualSilverspoonKd) {
  struct Case {
    std::string name;
    torch::nn::Conv2dOptions options;
    int input, output;
    int64_t border;  // pixels of a zero-padded border the fused biases change
  };
  const auto base = torch::nn::Conv2dOptions(6, 5, 3);
  for (const Case& c :
       {Case{"conv_both_valid", base, 1, 1, 0},
        Case{"conv_both_replicate",
             torch::nn::Conv2dOptions(6, 5, 3).padding(1).padding_mode(torch::kReplicate), 1, 1, 0},
        Case{"conv_input_zero_padding_no_bias", torch::nn::Conv2dOptions(6, 5, 3).padding(1), 0, -1,
             0},
        Case{"conv_output_strided_dilated",
             torch::nn::Conv2dOptions(6, 5, 3).stride(2).dilation(2).bias(false), -1, 1, 0}}) {
    torch::nn::Conv2d module(c.options);
    module->to(torch::kFloat64);
    Load(module, c.name, "module");
    ProjectorsToFuse projectors;
    if (c.input >= 0) {
      torch::nn::Conv2d p(torch::nn::Conv2dOptions(4, 6, 1).bias(c.input == 1));
      p->to(torch::kFloat64);
      Load(p, c.name, "input_projector");
      projectors.input_projector = p.ptr();
    }
    if (c.output >= 0) {
      torch::nn::Conv2d p(torch::nn::Conv2dOptions(3, c.input >= 0 ? 4 : 6, 1).bias(c.output == 1));
      p->to(torch::kFloat64);
      Load(p, c.name, "output_projector");
      projectors.output_projector = p.ptr();
    }
    absl::StatusOr<std::shared_ptr<torch::nn::Module>> fused =
        FuseProjectorsIntoModule(module.ptr(), projectors);
    ASSERT_THAT(fused, IsOk()) << c.name;
    ExpectFused(*fused, c.name, c.border);
    auto* conv = dynamic_cast<torch::nn::Conv2dImpl*>(fused->get());
    ASSERT_NE(conv, nullptr);
    EXPECT_EQ((*conv->options.stride()), (*c.options.stride()));
    EXPECT_EQ((*conv->options.dilation()), (*c.options.dilation()));
  }
}

TEST_F(ProjectorFusionTest, ZeroPaddedBiasesDifferOnTheBorderOnly) {
  // silverspoon-kd's caveat, made visible: the replicate case's parameters in a zero-padded
  // convolution; the fused module equals the chain inside, not on the 1-pixel border.
  torch::manual_seed(0);
  torch::nn::Conv2d module(torch::nn::Conv2dOptions(6, 5, 3).padding(1));
  torch::nn::Conv2d input(torch::nn::Conv2dOptions(4, 6, 1).bias(true));
  for (auto* m : {&module, &input}) (*m)->to(torch::kFloat64);
  absl::StatusOr<std::shared_ptr<torch::nn::Module>> fused =
      FuseProjectorsIntoModule(module.ptr(), {.input_projector = input.ptr()});
  ASSERT_THAT(fused, IsOk());
  const at::Tensor x = torch::randn({2, 4, 7, 9}, torch::kFloat64);
  const at::Tensor chain = module->forward(input->forward(x));
  const at::Tensor got = dynamic_cast<torch::nn::Conv2dImpl*>(fused->get())->forward(x);
  using torch::indexing::Slice;
  const auto inner =
      std::vector<at::indexing::TensorIndex>{Slice(), Slice(), Slice(1, -1), Slice(1, -1)};
  EXPECT_TRUE(got.index(inner).allclose(chain.index(inner), 0, 1e-12));
  EXPECT_FALSE(got.allclose(chain, 0, 1e-6));
}

TEST_F(ProjectorFusionTest, InplaceKeepsTheParametersIdentity) {
  torch::nn::Linear module(torch::nn::LinearOptions(8, 6));
  torch::nn::Linear input(torch::nn::LinearOptions(5, 8));
  for (auto* m : {&module, &input}) (*m)->to(torch::kFloat64);
  Load(module, "linear_both", "module");
  Load(input, "linear_both", "input_projector");
  const c10::TensorImpl* weight = module->weight.unsafeGetTensorImpl();
  const at::Tensor x = torch::randn({3, 5}, torch::kFloat64);
  const at::Tensor chain = module->forward(input->forward(x)).detach();
  absl::StatusOr<std::shared_ptr<torch::nn::Module>> fused =
      FuseProjectorsIntoModule(module.ptr(), {.input_projector = input.ptr(), .inplace = true});
  ASSERT_THAT(fused, IsOk());
  EXPECT_EQ(fused->get(), module.get());
  EXPECT_EQ(module->weight.unsafeGetTensorImpl(), weight);
  EXPECT_EQ(module->options.in_features(), 5);
  EXPECT_TRUE(module->weight.requires_grad());
  EXPECT_TRUE(module->forward(x).allclose(chain, 0, 1e-12));
  EXPECT_EQ(module->parameters().size(), 2u);
}

TEST_F(ProjectorFusionTest, BadInputsNameTheProblemAndTheFix) {
  torch::nn::Linear linear(torch::nn::LinearOptions(8, 6));
  torch::nn::Linear no_bias(torch::nn::LinearOptions(8, 6).bias(false));
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(6, 5, 3));
  torch::nn::Conv2d grouped(torch::nn::Conv2dOptions(6, 4, 3).groups(2));
  torch::nn::ReLU relu;
  const auto error = [](absl::StatusOr<std::shared_ptr<torch::nn::Module>> r) {
    EXPECT_FALSE(r.ok());
    return std::string(r.status().message());
  };
  torch::nn::Linear lp(torch::nn::LinearOptions(5, 8));
  EXPECT_THAT(error(FuseProjectorsIntoModule(relu.ptr(), {.input_projector = lp.ptr()})),
              HasSubstr("Linear or Conv2d module only"));
  torch::nn::Conv2d cp(torch::nn::Conv2dOptions(4, 6, 1));
  EXPECT_THAT(error(FuseProjectorsIntoModule(linear.ptr(), {.input_projector = cp.ptr()})),
              HasSubstr("input_projector is a Conv2d: a Linear module fuses Linear projectors"));
  torch::nn::Conv2d wide(torch::nn::Conv2dOptions(4, 6, 3));
  EXPECT_THAT(error(FuseProjectorsIntoModule(conv.ptr(), {.input_projector = wide.ptr()})),
              HasSubstr("must be a 1x1 convolution with stride 1, no padding and one group"));
  EXPECT_THAT(error(FuseProjectorsIntoModule(grouped.ptr(), {.input_projector = cp.ptr()})),
              HasSubstr("grouped convolution (groups 2)"));
  torch::nn::Linear narrow(torch::nn::LinearOptions(5, 7));
  EXPECT_THAT(error(FuseProjectorsIntoModule(linear.ptr(), {.input_projector = narrow.ptr()})),
              HasSubstr("input_projector gives 7 features but the module takes 8"));
  torch::nn::Linear out(torch::nn::LinearOptions(4, 6));
  EXPECT_THAT(error(FuseProjectorsIntoModule(
                  linear.ptr(), {.input_projector = lp.ptr(), .output_projector = out.ptr()})),
              HasSubstr("output_projector gives 6 features but input_projector takes 5"));
  EXPECT_THAT(error(FuseProjectorsIntoModule(no_bias.ptr(),
                                             {.input_projector = lp.ptr(), .inplace = true})),
              HasSubstr("fuse with inplace = false"));
  // No projector: the module itself, as silverspoon-kd returns it.
  absl::StatusOr<std::shared_ptr<torch::nn::Module>> same =
      FuseProjectorsIntoModule(linear.ptr(), {});
  ASSERT_THAT(same, IsOk());
  EXPECT_EQ(same->get(), linear.get());
}

}  // namespace
}  // namespace kd
