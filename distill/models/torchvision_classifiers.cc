// Registered ImageNet classifiers as torchvision defines them: "alexnet" (torchvision/models/
// alexnet.py), "mobilenet_v2" (mobilenetv2.py), "mobilenet_v3_large" and "mobilenet_v3_small"
// (mobilenetv3.py); the EfficientNets are in torchvision_efficientnets.cc. Module paths and
// parameter names are torchvision's, nested Sequentials included (features.2.conv.0.0,
// features.4.block.2.fc1), so torchvision's state dicts load by name. Weights start as
// torchvision's: the MobileNets' Kaiming-normal (fan_out) convolutions with zero biases, batch
// norms 1 and 0, linear layers normal(0, 0.01) with zero biases; AlexNet torch's defaults.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

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
using models_internal::ConvSpec;
using models_internal::InitTorchvisionWeights;
using models_internal::MakeDivisible;
using models_internal::Norm;
using models_internal::PooledClassifier;
using models_internal::SqueezeExcitation;

// ---------------------------------------------------------------------------------------------
// MobileNetV2.

struct InvertedResidualV2Impl : nn::Module {
  InvertedResidualV2Impl(int64_t in, int64_t out, int64_t stride, int64_t expand_ratio)
      : use_res_connect(stride == 1 && in == out) {
    const int64_t hidden = in * expand_ratio;
    HookedTensorSequential layers;
    if (expand_ratio != 1) {
      layers->push_back(ConvNormActivation(
          {.in = in, .out = hidden, .kernel = 1, .activation = Activation::kReLU6}));
    }
    layers->push_back(ConvNormActivation({.in = hidden,
                                          .out = hidden,
                                          .stride = stride,
                                          .groups = hidden,
                                          .activation = Activation::kReLU6}));
    layers->push_back(nn::Conv2d(nn::Conv2dOptions(hidden, out, 1).bias(false)));
    layers->push_back(nn::BatchNorm2d(out));
    conv = register_module("conv", layers);
  }

  at::Tensor forward(at::Tensor x) { return use_res_connect ? x + Call(conv, x) : Call(conv, x); }

  bool use_res_connect;
  HookedTensorSequential conv{nullptr};
};
TORCH_MODULE(InvertedResidualV2);

struct MobileNetV2Impl : nn::Module {
  MobileNetV2Impl(int64_t num_classes, double width_mult, int64_t round_nearest, double dropout) {
    // t (expansion), c (channels), n (blocks), s (first block's stride): torchvision's table.
    static constexpr int64_t kSetting[7][4] = {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2},
                                               {6, 64, 4, 2}, {6, 96, 3, 1}, {6, 160, 3, 2},
                                               {6, 320, 1, 1}};
    int64_t in = MakeDivisible(32 * width_mult, round_nearest);
    const int64_t last = MakeDivisible(1280 * std::max(1.0, width_mult), round_nearest);
    HookedSequential layers;
    layers->push_back(
        ConvNormActivation({.in = 3, .out = in, .stride = 2, .activation = Activation::kReLU6}));
    for (const auto& [t, c, n, s] : kSetting) {
      const int64_t out = MakeDivisible(c * width_mult, round_nearest);
      for (int64_t i = 0; i < n; ++i) {
        layers->push_back(InvertedResidualV2(in, out, i == 0 ? s : 1, t));
        in = out;
      }
    }
    layers->push_back(
        ConvNormActivation({.in = in, .out = last, .kernel = 1, .activation = Activation::kReLU6}));
    features = register_module("features", layers);
    classifier = register_module(
        "classifier", HookedSequential(nn::Dropout(dropout), nn::Linear(last, num_classes)));
    InitTorchvisionWeights(*this, /*uniform_linear=*/false);
  }

  at::Tensor forward(at::Tensor x) {
    x = at::adaptive_avg_pool2d(Call(features, x), {1, 1});
    return Call(classifier, at::flatten(x, 1));
  }

  HookedSequential features{nullptr}, classifier{nullptr};
};
TORCH_MODULE(MobileNetV2);

// ---------------------------------------------------------------------------------------------
// MobileNetV3.

// torchvision's InvertedResidualConfig, channels already adjusted by width_mult.
struct BlockConfigV3 {
  int64_t in, kernel, expanded, out;
  bool use_se, hardswish;
  int64_t stride, dilation;
};

struct InvertedResidualV3Impl : nn::Module {
  InvertedResidualV3Impl(const BlockConfigV3& c, Norm norm)
      : use_res_connect(c.stride == 1 && c.in == c.out) {
    const Activation act = c.hardswish ? Activation::kHardswish : Activation::kReLU;
    HookedTensorSequential layers;
    if (c.expanded != c.in) {
      layers->push_back(ConvNormActivation(
          {.in = c.in, .out = c.expanded, .kernel = 1, .norm = norm, .activation = act}));
    }
    layers->push_back(ConvNormActivation({.in = c.expanded,
                                          .out = c.expanded,
                                          .kernel = c.kernel,
                                          .stride = c.dilation > 1 ? 1 : c.stride,
                                          .groups = c.expanded,
                                          .dilation = c.dilation,
                                          .norm = norm,
                                          .activation = act}));
    if (c.use_se) {
      layers->push_back(SqueezeExcitation(c.expanded, MakeDivisible(c.expanded / 4, 8),
                                          Activation::kReLU, Activation::kHardsigmoid));
    }
    layers->push_back(ConvNormActivation({.in = c.expanded,
                                          .out = c.out,
                                          .kernel = 1,
                                          .norm = norm,
                                          .activation = Activation::kNone}));
    block = register_module("block", layers);
  }

  at::Tensor forward(at::Tensor x) {
    at::Tensor result = Call(block, x);
    return use_res_connect ? result + x : result;
  }

  bool use_res_connect;
  HookedTensorSequential block{nullptr};
};
TORCH_MODULE(InvertedResidualV3);

struct MobileNetV3Impl : PooledClassifier {
  MobileNetV3Impl(const std::vector<BlockConfigV3>& setting, int64_t last_channel,
                  int64_t num_classes, double dropout) {
    const Norm norm{.eps = 0.001, .momentum = 0.01};
    HookedSequential layers;
    layers->push_back(ConvNormActivation({.in = 3,
                                          .out = setting.front().in,
                                          .stride = 2,
                                          .norm = norm,
                                          .activation = Activation::kHardswish}));
    for (const BlockConfigV3& c : setting) layers->push_back(InvertedResidualV3(c, norm));
    const int64_t last_in = setting.back().out, last_out = 6 * last_in;
    layers->push_back(ConvNormActivation({.in = last_in,
                                          .out = last_out,
                                          .kernel = 1,
                                          .norm = norm,
                                          .activation = Activation::kHardswish}));
    RegisterParts(layers, 1,
                  HookedSequential(nn::Linear(last_out, last_channel), models_internal::Hardswish(),
                                   nn::Dropout(dropout), nn::Linear(last_channel, num_classes)));
    InitTorchvisionWeights(*this, /*uniform_linear=*/false);
  }
};
TORCH_MODULE(MobileNetV3);

// torchvision's _mobilenet_v3_conf.
std::pair<std::vector<BlockConfigV3>, int64_t> MobileNetV3Setting(bool large, double width_mult,
                                                                  bool reduced_tail, bool dilated) {
  const int64_t r = reduced_tail ? 2 : 1, d = dilated ? 2 : 1;
  const auto adjust = [&](int64_t channels) { return MakeDivisible(channels * width_mult, 8); };
  struct Row {
    int64_t in, kernel, expanded, out;
    bool se, hs;
    int64_t stride, dilation;
  };
  const std::vector<Row> rows =
      large ? std::vector<Row>{{16, 3, 16, 16, false, false, 1, 1},
                               {16, 3, 64, 24, false, false, 2, 1},
                               {24, 3, 72, 24, false, false, 1, 1},
                               {24, 5, 72, 40, true, false, 2, 1},
                               {40, 5, 120, 40, true, false, 1, 1},
                               {40, 5, 120, 40, true, false, 1, 1},
                               {40, 3, 240, 80, false, true, 2, 1},
                               {80, 3, 200, 80, false, true, 1, 1},
                               {80, 3, 184, 80, false, true, 1, 1},
                               {80, 3, 184, 80, false, true, 1, 1},
                               {80, 3, 480, 112, true, true, 1, 1},
                               {112, 3, 672, 112, true, true, 1, 1},
                               {112, 5, 672, 160 / r, true, true, 2, d},
                               {160 / r, 5, 960 / r, 160 / r, true, true, 1, d},
                               {160 / r, 5, 960 / r, 160 / r, true, true, 1, d}}
            : std::vector<Row>{{16, 3, 16, 16, true, false, 2, 1},
                               {16, 3, 72, 24, false, false, 2, 1},
                               {24, 3, 88, 24, false, false, 1, 1},
                               {24, 5, 96, 40, true, true, 2, 1},
                               {40, 5, 240, 40, true, true, 1, 1},
                               {40, 5, 240, 40, true, true, 1, 1},
                               {40, 5, 120, 48, true, true, 1, 1},
                               {48, 5, 144, 48, true, true, 1, 1},
                               {48, 5, 288, 96 / r, true, true, 2, d},
                               {96 / r, 5, 576 / r, 96 / r, true, true, 1, d},
                               {96 / r, 5, 576 / r, 96 / r, true, true, 1, d}};
  std::vector<BlockConfigV3> setting;
  for (const Row& row : rows) {
    setting.push_back({adjust(row.in), row.kernel, adjust(row.expanded), adjust(row.out), row.se,
                       row.hs, row.stride, row.dilation});
  }
  return {setting, adjust((large ? 1280 : 1024) / r)};
}

// ---------------------------------------------------------------------------------------------
// AlexNet (torch's default init, as torchvision's).

struct AlexNetImpl : PooledClassifier {
  AlexNetImpl(int64_t num_classes, double dropout) {
    const auto conv = [](int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad) {
      return nn::Conv2d(nn::Conv2dOptions(in, out, k).stride(stride).padding(pad));
    };
    const auto pool = [] { return nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2)); };
    RegisterParts(HookedSequential(conv(3, 64, 11, 4, 2), nn::ReLU(), pool(),
                                   conv(64, 192, 5, 1, 2), nn::ReLU(), pool(),
                                   conv(192, 384, 3, 1, 1), nn::ReLU(), conv(384, 256, 3, 1, 1),
                                   nn::ReLU(), conv(256, 256, 3, 1, 1), nn::ReLU(), pool()),
                  6,
                  HookedSequential(nn::Dropout(dropout), nn::Linear(256 * 6 * 6, 4096), nn::ReLU(),
                                   nn::Dropout(dropout), nn::Linear(4096, 4096), nn::ReLU(),
                                   nn::Linear(4096, num_classes)));
  }
};
TORCH_MODULE(AlexNet);

// The blocks run on their own (a torchdistill `sequential` of features' children).
const bool kBlocksRunAlone = [] {
  RegisterNativeModuleForward<InvertedResidualV2Impl>();
  RegisterNativeModuleForward<InvertedResidualV3Impl>();
  return true;
}();

// ---------------------------------------------------------------------------------------------
// Registration.

KwargSpec WidthMult() {
  return {.name = "width_mult",
          .type = KwargType::kNumber,
          .doc = "channel multiplier (channels rounded to multiples of 8, as torchvision)",
          .default_value = 1.0,
          .min = 0,
          .min_exclusive = true};
}

absl::StatusOr<std::unique_ptr<Model>> MakeAlexNet(const Kwargs& kwargs) {
  return MakeNativeModel(
      AlexNet(IntKwarg(kwargs, "num_classes"), NumberKwarg(kwargs, "dropout")).ptr());
}
KD_REGISTER(ModelRegistry(), "alexnet", MakeAlexNet,
            {models_internal::ImageNetClassesSpec(),
             models_internal::DropoutSpec("before the last linear layer", 0.5)});

absl::StatusOr<std::unique_ptr<Model>> MakeMobileNetV2(const Kwargs& kwargs) {
  return MakeNativeModel(
      MobileNetV2(IntKwarg(kwargs, "num_classes"), NumberKwarg(kwargs, "width_mult"),
                  IntKwarg(kwargs, "round_nearest"), NumberKwarg(kwargs, "dropout"))
          .ptr());
}
KD_REGISTER(ModelRegistry(), "mobilenet_v2", MakeMobileNetV2,
            {models_internal::ImageNetClassesSpec(),
             WidthMult(),
             {.name = "round_nearest",
              .type = KwargType::kInteger,
              .doc = "channels are rounded to multiples of this (1: no rounding)",
              .default_value = 8,
              .min = 1},
             models_internal::DropoutSpec("before the last linear layer", 0.2)});

auto MakeMobileNetV3(bool large) {
  return [=](const Kwargs& kwargs) -> absl::StatusOr<std::unique_ptr<Model>> {
    auto [setting, last_channel] =
        MobileNetV3Setting(large, NumberKwarg(kwargs, "width_mult"),
                           BoolKwarg(kwargs, "reduced_tail"), BoolKwarg(kwargs, "dilated"));
    return MakeNativeModel(MobileNetV3(setting, last_channel, IntKwarg(kwargs, "num_classes"),
                                       NumberKwarg(kwargs, "dropout"))
                               .ptr());
  };
}
std::vector<KwargSpec> MobileNetV3Specs() {
  return {models_internal::ImageNetClassesSpec(),
          WidthMult(),
          {.name = "reduced_tail",
           .type = KwargType::kBool,
           .doc = "halve the channels of the last blocks (torchvision's option)",
           .default_value = false},
          {.name = "dilated",
           .type = KwargType::kBool,
           .doc = "dilate the last blocks instead of striding (torchvision's option)",
           .default_value = false},
          models_internal::DropoutSpec("before the last linear layer", 0.2)};
}
KD_REGISTER(ModelRegistry(), "mobilenet_v3_large", MakeMobileNetV3(true), MobileNetV3Specs());
KD_REGISTER(ModelRegistry(), "mobilenet_v3_small", MakeMobileNetV3(false), MobileNetV3Specs());

}  // namespace
}  // namespace kd
