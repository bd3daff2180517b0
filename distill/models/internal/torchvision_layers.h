// The building blocks torchvision's mobile classifiers share (torchvision/ops/misc.py):
// Conv2dNormActivation, SqueezeExcitation, Hardswish, Hardsigmoid and _make_divisible, with
// torchvision's module names inside (a Conv2dNormActivation is a Sequential "0" conv, "1" batch
// norm, "2" activation; a SqueezeExcitation has avgpool, fc1, fc2, activation, scale_activation).
#ifndef LIBKD_DISTILL_MODELS_INTERNAL_TORCHVISION_LAYERS_H_
#define LIBKD_DISTILL_MODELS_INTERNAL_TORCHVISION_LAYERS_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/pooling.h>
#include <torch/nn/pimpl.h>

#include "absl/status/statusor.h"
#include "base/kwargs.h"
#include "hooks/hook_point.h"

namespace kd {
namespace models_internal {

// Whether `names` holds `name`.
inline bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// torchvision's _make_divisible: `v` rounded to the nearest multiple of `divisor` (at least
// `divisor`), one step up where that rounds down by more than 10%.
int64_t MakeDivisible(double v, int64_t divisor);

// torch.nn.Hardswish and Hardsigmoid, which libtorch's torch::nn lacks.
struct HardswishImpl : torch::nn::Module {
  at::Tensor forward(at::Tensor x) { return at::hardswish(x); }
};
TORCH_MODULE(Hardswish);
struct HardsigmoidImpl : torch::nn::Module {
  at::Tensor forward(at::Tensor x) { return at::hardsigmoid(x); }
};
TORCH_MODULE(Hardsigmoid);

enum class Activation { kNone, kReLU, kReLU6, kHardswish, kHardsigmoid, kSiLU, kSigmoid };

// torch.nn.BatchNorm2d's eps and momentum.
struct Norm {
  double eps = 1e-5;
  double momentum = 0.1;
};

struct ConvSpec {
  int64_t in = 0, out = 0;
  int64_t kernel = 3, stride = 1, groups = 1, dilation = 1;
  Norm norm;
  Activation activation = Activation::kReLU;
};

// torchvision's Conv2dNormActivation: a bias-free convolution padded to keep the size
// ((kernel - 1) / 2 * dilation), a batch norm, then the activation unless kNone.
HookedTensorSequential ConvNormActivation(const ConvSpec& spec);

// torchvision's SqueezeExcitation: `input * scale_activation(fc2(activation(fc1(avgpool(x)))))`.
struct SqueezeExcitationImpl : torch::nn::Module {
  SqueezeExcitationImpl(int64_t channels, int64_t squeeze_channels, Activation activation,
                        Activation scale_activation);
  at::Tensor forward(at::Tensor x);

  torch::nn::AdaptiveAvgPool2d avgpool{nullptr};
  torch::nn::Conv2d fc1{nullptr}, fc2{nullptr};
  torch::nn::ReLU relu{nullptr};  // activation: one of these two
  torch::nn::SiLU silu{nullptr};
  Hardsigmoid hardsigmoid{nullptr};  // scale_activation: one of these two
  torch::nn::Sigmoid sigmoid{nullptr};
};
TORCH_MODULE(SqueezeExcitation);

// torchvision's init of its MobileNets and EfficientNets: Kaiming-normal (fan_out) convolutions
// with zero biases, linear layers normal(0, 0.01) (`uniform_linear`: uniform(+-1/sqrt(out)), as
// EfficientNet's) with zero biases; batch norms keep torch's 1 and 0.
void InitTorchvisionWeights(torch::nn::Module& root, bool uniform_linear);

// torchvision's common tail: features -> avgpool -> flatten -> classifier (MobileNetV3,
// EfficientNet, AlexNet), under those names.
struct PooledClassifier : torch::nn::Module {
  void RegisterParts(HookedSequential features_part, int64_t pooled_size,
                     HookedSequential classifier_part) {
    features = register_module("features", std::move(features_part));
    avgpool = register_module("avgpool", torch::nn::AdaptiveAvgPool2d(pooled_size));
    classifier = register_module("classifier", std::move(classifier_part));
  }

  at::Tensor forward(at::Tensor x) {
    x = Call(avgpool, Call(features, x));
    return Call(classifier, at::flatten(x, 1));
  }

  HookedSequential features{nullptr};
  torch::nn::AdaptiveAvgPool2d avgpool{nullptr};
  HookedSequential classifier{nullptr};
};

// A module that runs named children one after another: torch.nn.Sequential built from an
// OrderedDict, whose children may be any module with a Tensor -> Tensor forward (HookedSequentials
// included, which a HookedSequential cannot hold).
struct ChainImpl : torch::nn::Module {
  template <typename M>
  void Append(const std::string& name, M module) {
    M held = register_module(name, std::move(module));
    steps.push_back([held](at::Tensor x) mutable -> at::Tensor { return Call(held, x); });
  }
  // A step with no module (a functional flatten).
  void AppendFunction(std::function<at::Tensor(at::Tensor)> fn) { steps.push_back(std::move(fn)); }
  at::Tensor forward(at::Tensor x) {
    for (auto& step : steps) x = step(std::move(x));
    return x;
  }
  std::vector<std::function<at::Tensor(at::Tensor)>> steps;
};
TORCH_MODULE(Chain);

// The head of HND/GHND's bottleneck-injected students (torchdistill's
// models/custom/bottleneck/classification): BottleneckBase's `encoder` (the first
// `bottleneck_idx` layers of the list) and `decoder` (the rest), which stand in for the
// original model's first stages. No compressor or decompressor.
enum class HndHead { kResNet152, kDenseNet, kInception3 };
// How a custom_* model names its modules: as torchdistill's in-package definitions
// ("bottleneck", a flatten module before fc) or as sc2-benchmark's (torchdistill's samples with
// repo_or_dir 'yoshitomo-matsubara/sc2-benchmark': "bottleneck_layer", "inception_modules").
enum class HndNaming { kTorchdistill, kSc2bench };
// The number of layers in the list (bottleneck_idx lies in 1 .. this - 1).
int64_t HndHeadLayers(HndHead head);
struct HndBottleneckImpl : torch::nn::Module {
  HndBottleneckImpl(HndHead head, int64_t bottleneck_channel, int64_t bottleneck_idx);
  at::Tensor forward(at::Tensor x) { return Call(decoder, Call(encoder, x)); }
  HookedTensorSequential encoder{nullptr}, decoder{nullptr};
};
TORCH_MODULE(HndBottleneck);

// The kwargs of a custom_* model beside its original's: bottleneck_channel, bottleneck_idx,
// compressor and decompressor (null only), `short_kwarg` (the original's children kept, default
// `short_default`) and naming.
std::vector<KwargSpec> HndSpecs(HndHead head, const std::string& short_kwarg,
                                const std::vector<std::string>& short_default);
struct HndOptions {
  int64_t bottleneck_channel = 12;
  int64_t bottleneck_idx = 7;
  std::vector<std::string> short_names;  // as given, checked against `children`
  HndNaming naming = HndNaming::kTorchdistill;
};
// Reads and checks those kwargs; `children` are the names short names may take.
absl::StatusOr<HndOptions> ReadHndOptions(const Kwargs& kwargs, const std::string& short_kwarg,
                                          const std::vector<std::string>& children);

}  // namespace models_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_MODELS_INTERNAL_TORCHVISION_LAYERS_H_
