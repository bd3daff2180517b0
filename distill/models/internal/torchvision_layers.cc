#include "distill/models/internal/torchvision_layers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/linear.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hooks/native_model.h"

namespace kd {
namespace models_internal {

namespace nn = torch::nn;

void InitTorchvisionWeights(nn::Module& root, bool uniform_linear) {
  for (const std::shared_ptr<nn::Module>& module : root.modules(/*include_self=*/false)) {
    if (auto* conv = module->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(conv->weight, /*a=*/0, torch::kFanOut);
      if (conv->bias.defined()) nn::init::zeros_(conv->bias);
    } else if (auto* linear = module->as<nn::Linear>()) {
      if (uniform_linear) {
        const double range = 1.0 / std::sqrt(static_cast<double>(linear->weight.size(0)));
        nn::init::uniform_(linear->weight, -range, range);
      } else {
        nn::init::normal_(linear->weight, 0, 0.01);
      }
      nn::init::zeros_(linear->bias);
    }
  }
}

int64_t MakeDivisible(double v, int64_t divisor) {
  const auto d = static_cast<double>(divisor);
  int64_t rounded = std::max(divisor, static_cast<int64_t>(v + d / 2) / divisor * divisor);
  if (static_cast<double>(rounded) < 0.9 * v) rounded += divisor;
  return rounded;
}

HookedTensorSequential ConvNormActivation(const ConvSpec& spec) {
  HookedTensorSequential layers;
  layers->push_back(nn::Conv2d(nn::Conv2dOptions(spec.in, spec.out, spec.kernel)
                                   .stride(spec.stride)
                                   .padding((spec.kernel - 1) / 2 * spec.dilation)
                                   .dilation(spec.dilation)
                                   .groups(spec.groups)
                                   .bias(false)));
  layers->push_back(nn::BatchNorm2d(
      nn::BatchNorm2dOptions(spec.out).eps(spec.norm.eps).momentum(spec.norm.momentum)));
  switch (spec.activation) {
    case Activation::kNone:
      break;
    case Activation::kReLU:
      layers->push_back(nn::ReLU());
      break;
    case Activation::kReLU6:
      layers->push_back(nn::ReLU6());
      break;
    case Activation::kHardswish:
      layers->push_back(Hardswish());
      break;
    case Activation::kSiLU:
      layers->push_back(nn::SiLU());
      break;
    case Activation::kHardsigmoid:
    case Activation::kSigmoid:
      throw std::invalid_argument("ConvNormActivation: no torchvision block ends in a sigmoid");
  }
  return layers;
}

SqueezeExcitationImpl::SqueezeExcitationImpl(int64_t channels, int64_t squeeze_channels,
                                             Activation activation, Activation scale_activation)
    : avgpool(register_module("avgpool", nn::AdaptiveAvgPool2d(1))),
      fc1(register_module("fc1", nn::Conv2d(nn::Conv2dOptions(channels, squeeze_channels, 1)))),
      fc2(register_module("fc2", nn::Conv2d(nn::Conv2dOptions(squeeze_channels, channels, 1)))) {
  if (activation == Activation::kSiLU) {
    silu = register_module("activation", nn::SiLU());
  } else {
    relu = register_module("activation", nn::ReLU());
  }
  if (scale_activation == Activation::kHardsigmoid) {
    hardsigmoid = register_module("scale_activation", Hardsigmoid());
  } else {
    sigmoid = register_module("scale_activation", nn::Sigmoid());
  }
}

at::Tensor SqueezeExcitationImpl::forward(at::Tensor x) {
  at::Tensor scale = Call(fc1, Call(avgpool, x));
  scale = Call(fc2, silu ? Call(silu, scale) : Call(relu, scale));
  scale = hardsigmoid ? Call(hardsigmoid, scale) : Call(sigmoid, scale);
  return scale * x;
}

namespace {

// A torchdistill `sequential` of a custom_* model runs its bottleneck (and sc2-benchmark's
// inception_modules) on their own.
const bool kForwardsRegistered = [] {
  RegisterNativeModuleForward<ChainImpl>();
  RegisterNativeModuleForward<HndBottleneckImpl>();
  RegisterNativeModuleForward<SqueezeExcitationImpl>();
  return true;
}();

// The layer lists of torchdistill's Bottleneck4ResNet152, Bottleneck4DenseNet and
// Bottleneck4Inception3.
std::vector<nn::AnyModule> HndLayers(HndHead head, int64_t bottleneck_channel) {
  const auto conv = [](int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad) {
    return nn::AnyModule(
        nn::Conv2d(nn::Conv2dOptions(in, out, k).stride(stride).padding(pad).bias(false)));
  };
  const auto bn = [](int64_t c) { return nn::AnyModule(nn::BatchNorm2d(c)); };
  const auto relu = [] { return nn::AnyModule(nn::ReLU()); };
  const int64_t c = bottleneck_channel;
  const bool inception = head == HndHead::kInception3;
  std::vector<nn::AnyModule> layers = {
      conv(3, 64, 7, 2, inception ? 0 : 3),
      bn(64),
      relu(),
      nn::AnyModule(nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(inception ? 0 : 1))),
      bn(64),
      relu(),
      conv(64, c, 2, 2, 1),
      bn(c),
      relu()};
  // The decoder's convolutions after the bottleneck: (out channels, padding), then the pooling.
  std::vector<std::pair<int64_t, int64_t>> convs;
  int64_t pool_stride = 1;
  switch (head) {
    case HndHead::kResNet152:
      convs = {{512, 1}, {512, 1}, {512, 0}, {512, 0}};
      break;
    case HndHead::kDenseNet:
      convs = {{512, 1}, {512, 1}, {256, 0}, {256, 0}, {256, 0}};
      pool_stride = 2;
      break;
    case HndHead::kInception3:
      convs = {{256, 1}, {256, 0}, {192, 0}};
      break;
  }
  int64_t in = c;
  for (size_t i = 0; i < convs.size(); ++i) {
    const auto [out, pad] = convs[i];
    layers.push_back(conv(in, out, 2, 1, pad));
    if (i + 1 < convs.size()) {
      layers.push_back(bn(out));
      layers.push_back(relu());
    }
    in = out;
  }
  layers.push_back(nn::AnyModule(nn::AvgPool2d(nn::AvgPool2dOptions(2).stride(pool_stride))));
  return layers;
}

}  // namespace

int64_t HndHeadLayers(HndHead head) { return static_cast<int64_t>(HndLayers(head, 1).size()); }

HndBottleneckImpl::HndBottleneckImpl(HndHead head, int64_t bottleneck_channel,
                                     int64_t bottleneck_idx) {
  std::vector<nn::AnyModule> layers = HndLayers(head, bottleneck_channel);
  TORCH_CHECK(bottleneck_idx >= 1 && bottleneck_idx < static_cast<int64_t>(layers.size()),
              "bottleneck_idx ", bottleneck_idx, " is not in 1 .. ", layers.size() - 1);
  HookedTensorSequential head_layers, tail_layers;
  for (size_t i = 0; i < layers.size(); ++i) {
    (static_cast<int64_t>(i) < bottleneck_idx ? head_layers : tail_layers)
        ->push_back(std::move(layers[i]));
  }
  encoder = register_module("encoder", head_layers);
  decoder = register_module("decoder", tail_layers);
}

std::vector<KwargSpec> HndSpecs(HndHead head, const std::string& short_kwarg,
                                const std::vector<std::string>& short_default) {
  return {
      {.name = "bottleneck_channel",
       .type = KwargType::kInteger,
       .doc = "channels of the bottleneck, the encoder's output",
       .default_value = 12,
       .min = 1},
      {.name = "bottleneck_idx",
       .type = KwargType::kInteger,
       .doc = "where the layer list splits into encoder and decoder",
       .default_value = 7,
       .min = 1,
       .max = static_cast<double>(HndHeadLayers(head) - 1)},
      {.name = "compressor",
       .type = KwargType::kString,
       .doc = "torchdistill's bottleneck processor after the encoder: null only (libkd has none)"},
      {.name = "decompressor",
       .type = KwargType::kString,
       .doc = "torchdistill's bottleneck processor before the decoder: null only (libkd has none)"},
      {.name = short_kwarg,
       .type = KwargType::kStringList,
       .doc = "the original model's children kept after the bottleneck, in the original's order",
       .default_value = c10::IValue(c10::List<std::string>(short_default))},
      {.name = "naming",
       .type = KwargType::kString,
       .doc = "module names: torchdistill's in-package models (bottleneck) or sc2-benchmark's "
              "(bottleneck_layer; the importer sets it for repo_or_dir sc2-benchmark)",
       .default_value = "torchdistill",
       .choices = {"torchdistill", "sc2bench"}}};
}

absl::StatusOr<HndOptions> ReadHndOptions(const Kwargs& kwargs, const std::string& short_kwarg,
                                          const std::vector<std::string>& children) {
  for (const char* processor : {"compressor", "decompressor"}) {
    if (FindKwarg(kwargs, processor) != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(processor,
                       ": torchdistill's bottleneck processors (quantization, JPEG) "
                       "are not in libkd; leave it null"));
    }
  }
  HndOptions options;
  options.bottleneck_channel = IntKwarg(kwargs, "bottleneck_channel");
  options.bottleneck_idx = IntKwarg(kwargs, "bottleneck_idx");
  options.short_names = StringListKwarg(kwargs, short_kwarg);
  for (const std::string& name : options.short_names) {
    if (!Contains(children, name)) {
      return absl::InvalidArgumentError(absl::StrCat(short_kwarg, ": \"", name,
                                                     "\" is not a child of the original model (",
                                                     absl::StrJoin(children, ", "), ")"));
    }
  }
  options.naming =
      StringKwarg(kwargs, "naming") == "sc2bench" ? HndNaming::kSc2bench : HndNaming::kTorchdistill;
  return options;
}

}  // namespace models_internal
}  // namespace kd
