// Registered "efficientnet_b0" ... "efficientnet_b7" as torchvision defines them
// (torchvision/models/efficientnet.py): features.0 the stem, features.1 ... features.7 the stages
// of MBConv blocks (features.S.B.block.K, features.S.B.stochastic_depth), features.8 the last
// convolution, avgpool, classifier, so torchvision's state dicts load by name. Weights start as
// torchvision's: Kaiming-normal (fan_out) convolutions with zero biases, batch norms 1 and 0, the
// linear layer uniform(+-1/sqrt(out)) with a zero bias.
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include "absl/status/statusor.h"
#include "base/kwargs.h"
#include "distill/models/internal/kwargs_util.h"
#include "distill/models/internal/torchvision_layers.h"
#include "distill/models/model_registry.h"
#include "hooks/hook_point.h"
#include "hooks/native_model.h"

namespace kd {
namespace {

namespace nn = torch::nn;
using models_internal::Activation;
using models_internal::ConvNormActivation;
using models_internal::InitTorchvisionWeights;
using models_internal::MakeDivisible;
using models_internal::Norm;
using models_internal::PooledClassifier;
using models_internal::SqueezeExcitation;

// torchvision's StochasticDepth(p, "row"): in training, each sample's residual branch is zeroed
// with probability p and the survivors scaled by 1 / (1 - p).
struct StochasticDepthImpl : nn::Module {
  explicit StochasticDepthImpl(double p) : p(p) {}

  at::Tensor forward(at::Tensor x) {
    if (!is_training() || p == 0.0) return x;
    std::vector<int64_t> size(x.dim(), 1);
    size[0] = x.size(0);
    const double survival = 1.0 - p;
    at::Tensor noise = at::empty(size, x.options()).bernoulli_(survival);
    if (survival > 0.0) noise.div_(survival);
    return x * noise;
  }

  double p;
};
TORCH_MODULE(StochasticDepth);

struct MBConvImpl : nn::Module {
  MBConvImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t expand_ratio,
             double stochastic_depth_prob, Norm norm)
      : use_res_connect(stride == 1 && in == out) {
    const int64_t expanded = MakeDivisible(static_cast<double>(in * expand_ratio), 8);
    HookedTensorSequential layers;
    if (expanded != in) {
      layers->push_back(ConvNormActivation(
          {.in = in, .out = expanded, .kernel = 1, .norm = norm, .activation = Activation::kSiLU}));
    }
    layers->push_back(ConvNormActivation({.in = expanded,
                                          .out = expanded,
                                          .kernel = kernel,
                                          .stride = stride,
                                          .groups = expanded,
                                          .norm = norm,
                                          .activation = Activation::kSiLU}));
    layers->push_back(SqueezeExcitation(expanded, std::max<int64_t>(1, in / 4), Activation::kSiLU,
                                        Activation::kSigmoid));
    layers->push_back(ConvNormActivation(
        {.in = expanded, .out = out, .kernel = 1, .norm = norm, .activation = Activation::kNone}));
    block = register_module("block", layers);
    stochastic_depth = register_module("stochastic_depth", StochasticDepth(stochastic_depth_prob));
  }

  at::Tensor forward(at::Tensor x) {
    at::Tensor result = Call(block, x);
    // As torchvision: stochastic depth runs on residual blocks only.
    return use_res_connect ? Call(stochastic_depth, result) + x : result;
  }

  bool use_res_connect;
  HookedTensorSequential block{nullptr};
  StochasticDepth stochastic_depth{nullptr};
};
TORCH_MODULE(MBConv);

struct EfficientNetImpl : PooledClassifier {
  EfficientNetImpl(double width_mult, double depth_mult, Norm norm, int64_t num_classes,
                   double dropout, double stochastic_depth_prob) {
    // expand ratio, kernel, stride, in, out, layers: torchvision's B0 table.
    static constexpr int64_t kSetting[7][6] = {
        {1, 3, 1, 32, 16, 1},  {6, 3, 2, 16, 24, 2},   {6, 5, 2, 24, 40, 2},  {6, 3, 2, 40, 80, 3},
        {6, 5, 1, 80, 112, 3}, {6, 5, 2, 112, 192, 4}, {6, 3, 1, 192, 320, 1}};
    const auto channels = [&](int64_t c) { return MakeDivisible(c * width_mult, 8); };
    const auto depth = [&](int64_t n) {
      return static_cast<int64_t>(std::ceil(static_cast<double>(n) * depth_mult));
    };
    int64_t total_blocks = 0;
    for (const auto& row : kSetting) total_blocks += depth(row[5]);
    HookedSequential layers;
    layers->push_back(ConvNormActivation({.in = 3,
                                          .out = channels(kSetting[0][3]),
                                          .stride = 2,
                                          .norm = norm,
                                          .activation = Activation::kSiLU}));
    int64_t block_id = 0;
    for (const auto& [expand, kernel, stride, in, out, n] : kSetting) {
      HookedTensorSequential stage;
      for (int64_t i = 0; i < depth(n); ++i, ++block_id) {
        const double p = stochastic_depth_prob * static_cast<double>(block_id) /
                         static_cast<double>(total_blocks);
        stage->push_back(MBConv(i == 0 ? channels(in) : channels(out), channels(out), kernel,
                                i == 0 ? stride : 1, expand, p, norm));
      }
      layers->push_back(stage);
    }
    const int64_t last_in = channels(kSetting[6][4]), last_out = 4 * last_in;
    layers->push_back(ConvNormActivation({.in = last_in,
                                          .out = last_out,
                                          .kernel = 1,
                                          .norm = norm,
                                          .activation = Activation::kSiLU}));
    RegisterParts(layers, 1,
                  HookedSequential(nn::Dropout(dropout), nn::Linear(last_out, num_classes)));
    InitTorchvisionWeights(*this, /*uniform_linear=*/true);
  }
};
TORCH_MODULE(EfficientNet);

// The blocks run on their own (a torchdistill `sequential` of features' children).
const bool kBlocksRunAlone = [] {
  RegisterNativeModuleForward<MBConvImpl>();
  RegisterNativeModuleForward<StochasticDepthImpl>();
  return true;
}();

auto MakeEfficientNet(double width_mult, double depth_mult, Norm norm) {
  return [=](const Kwargs& kwargs) -> absl::StatusOr<std::unique_ptr<Model>> {
    return MakeNativeModel(
        EfficientNet(width_mult, depth_mult, norm, IntKwarg(kwargs, "num_classes"),
                     NumberKwarg(kwargs, "dropout"), NumberKwarg(kwargs, "stochastic_depth_prob"))
            .ptr());
  };
}
std::vector<KwargSpec> EfficientNetSpecs(double dropout) {
  return {models_internal::ImageNetClassesSpec(),
          models_internal::DropoutSpec("before the last linear layer", dropout),
          {.name = "stochastic_depth_prob",
           .type = KwargType::kNumber,
           .doc = "the last block's probability of skipping its residual branch in training "
                  "(block i of n: this times i / n)",
           .default_value = 0.2,
           .min = 0,
           .max = 1}};
}
// torchvision 0.29's efficientnet_b0 ... b7: width and depth multipliers, dropout, batch norm.
constexpr Norm kTorchNorm{}, kTfNorm{.eps = 0.001, .momentum = 0.01};
KD_REGISTER(ModelRegistry(), "efficientnet_b0", MakeEfficientNet(1.0, 1.0, kTorchNorm),
            EfficientNetSpecs(0.2));
KD_REGISTER(ModelRegistry(), "efficientnet_b1", MakeEfficientNet(1.0, 1.1, kTorchNorm),
            EfficientNetSpecs(0.2));
KD_REGISTER(ModelRegistry(), "efficientnet_b2", MakeEfficientNet(1.1, 1.2, kTorchNorm),
            EfficientNetSpecs(0.3));
KD_REGISTER(ModelRegistry(), "efficientnet_b3", MakeEfficientNet(1.2, 1.4, kTorchNorm),
            EfficientNetSpecs(0.3));
KD_REGISTER(ModelRegistry(), "efficientnet_b4", MakeEfficientNet(1.4, 1.8, kTorchNorm),
            EfficientNetSpecs(0.4));
KD_REGISTER(ModelRegistry(), "efficientnet_b5", MakeEfficientNet(1.6, 2.2, kTfNorm),
            EfficientNetSpecs(0.4));
KD_REGISTER(ModelRegistry(), "efficientnet_b6", MakeEfficientNet(1.8, 2.6, kTfNorm),
            EfficientNetSpecs(0.5));
KD_REGISTER(ModelRegistry(), "efficientnet_b7", MakeEfficientNet(2.0, 3.1, kTfNorm),
            EfficientNetSpecs(0.5));

}  // namespace
}  // namespace kd
