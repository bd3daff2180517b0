// Registered ImageNet ResNets as torchvision defines them (torchvision/models/resnet.py):
// "resnet18", "resnet34" (BasicBlock), "resnet50", "resnet101", "resnet152", "wide_resnet50_2",
// "wide_resnet101_2" (Bottleneck, the stride on the 3x3 convolution: ResNet v1.5), with
// torchvision's module paths and parameter names (conv1, bn1, maxpool, layerN.M.{conv1, bn1,
// conv2, bn2, conv3, bn3, downsample.0, downsample.1}, fc), so torchvision's state dicts load by
// name. Weights start as torchvision's: Kaiming-normal (fan_out) convolutions, batch norms 1 and
// 0, the linear layer torch's default; `zero_init_residual` zeroes each block's last batch-norm
// weight.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "distill/models/internal/kwargs_util.h"
#include "distill/models/internal/torchvision_layers.h"
#include "distill/models/model_registry.h"
#include "hooks/hook_point.h"
#include "hooks/native_model.h"

namespace kd {
namespace {

namespace nn = torch::nn;

nn::Conv2d Conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                int64_t groups = 1) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel)
                        .stride(stride)
                        .padding(padding)
                        .groups(groups)
                        .bias(false));
}

// torchvision's BasicBlock (expansion 1) and Bottleneck (expansion 4): the convolutions, batch
// norms and downsample (conv1x1 + BN where the shape changes) under torchvision's names.
struct ResidualBlockImpl : nn::Module {
  ResidualBlockImpl(bool bottleneck, int64_t in, int64_t planes, int64_t stride, int64_t width)
      : bottleneck(bottleneck) {
    const int64_t out = bottleneck ? planes * 4 : planes;
    if (bottleneck) {
      conv1 = register_module("conv1", Conv(in, width, 1, 1, 0));
      bn1 = register_module("bn1", nn::BatchNorm2d(width));
      conv2 = register_module("conv2", Conv(width, width, 3, stride, 1));
      bn2 = register_module("bn2", nn::BatchNorm2d(width));
      conv3 = register_module("conv3", Conv(width, out, 1, 1, 0));
      bn3 = register_module("bn3", nn::BatchNorm2d(out));
    } else {
      conv1 = register_module("conv1", Conv(in, planes, 3, stride, 1));
      bn1 = register_module("bn1", nn::BatchNorm2d(planes));
      conv2 = register_module("conv2", Conv(planes, planes, 3, 1, 1));
      bn2 = register_module("bn2", nn::BatchNorm2d(planes));
    }
    relu = register_module("relu", nn::ReLU());
    if (stride != 1 || in != out) {
      downsample = register_module(
          "downsample", HookedSequential(Conv(in, out, 1, stride, 0), nn::BatchNorm2d(out)));
    }
  }

  at::Tensor forward(at::Tensor x) {
    at::Tensor out = Call(relu, Call(bn1, Call(conv1, x)));
    out = Call(bn2, Call(conv2, out));
    if (bottleneck) out = Call(bn3, Call(conv3, Call(relu, out)));
    return Call(relu, out + (downsample ? Call(downsample, x) : x));
  }

  // The batch norm that ends the residual branch (zero_init_residual zeroes its weight).
  nn::BatchNorm2d& last_norm() { return bottleneck ? bn3 : bn2; }

  bool bottleneck;
  nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  nn::ReLU relu{nullptr};
  HookedSequential downsample{nullptr};
};
TORCH_MODULE(ResidualBlock);

struct TorchvisionResNetImpl : nn::Module {
  TorchvisionResNetImpl(bool bottleneck, std::vector<int64_t> layers, int64_t width_per_group,
                        int64_t num_classes, bool zero_init_residual)
      : conv1(register_module("conv1", Conv(3, 64, 7, 2, 3))),
        bn1(register_module("bn1", nn::BatchNorm2d(64))),
        relu(register_module("relu", nn::ReLU())),
        maxpool(register_module("maxpool",
                                nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)))) {
    int64_t in = 64;
    std::vector<ResidualBlock> blocks;
    for (int stage = 0; stage < 4; ++stage) {
      const int64_t planes = int64_t{64} << stage;
      const int64_t width = planes * width_per_group / 64;
      HookedSequential layer;
      for (int64_t i = 0; i < layers[stage]; ++i) {
        ResidualBlock block(bottleneck, in, planes, i == 0 && stage > 0 ? 2 : 1, width);
        blocks.push_back(block);
        layer->push_back(block);
        in = bottleneck ? planes * 4 : planes;
      }
      stages.push_back(register_module(absl::StrCat("layer", stage + 1), layer));
    }
    avgpool = register_module("avgpool", nn::AdaptiveAvgPool2d(1));
    fc = register_module("fc", nn::Linear(in, num_classes));
    for (const std::shared_ptr<nn::Module>& module : modules(/*include_self=*/false)) {
      if (auto* conv = module->as<nn::Conv2d>()) {
        nn::init::kaiming_normal_(conv->weight, /*a=*/0, torch::kFanOut, torch::kReLU);
      }
    }
    if (zero_init_residual) {
      for (ResidualBlock& block : blocks) nn::init::zeros_(block->last_norm()->weight);
    }
  }

  at::Tensor forward(at::Tensor x) {
    x = Call(maxpool, Call(relu, Call(bn1, Call(conv1, x))));
    for (HookedSequential& stage : stages) x = Call(stage, x);
    return Call(fc, at::flatten(Call(avgpool, x), 1));
  }

  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::ReLU relu;
  nn::MaxPool2d maxpool;
  std::vector<HookedSequential> stages;
  nn::AdaptiveAvgPool2d avgpool{nullptr};
  nn::Linear fc{nullptr};
};
TORCH_MODULE(TorchvisionResNet);

// A block runs on its own (a torchdistill `sequential` such as layer1.0, layer1.1).
const bool kBlocksRunAlone = [] {
  RegisterNativeModuleForward<ResidualBlockImpl>();
  return true;
}();

auto MakeResNet(bool bottleneck, std::vector<int64_t> layers, int64_t width_per_group = 64) {
  return [=](const Kwargs& kwargs) -> absl::StatusOr<std::unique_ptr<Model>> {
    return MakeNativeModel(TorchvisionResNet(bottleneck, layers, width_per_group,
                                             IntKwarg(kwargs, "num_classes"),
                                             BoolKwarg(kwargs, "zero_init_residual"))
                               .ptr());
  };
}

std::vector<KwargSpec> ResNetSpecs() {
  return {models_internal::ImageNetClassesSpec(),
          {.name = "zero_init_residual",
           .type = KwargType::kBool,
           .doc = "each block's last batch-norm weight starts at 0 (torchvision's option)",
           .default_value = false}};
}

KD_REGISTER(ModelRegistry(), "resnet18", MakeResNet(false, {2, 2, 2, 2}), ResNetSpecs());
KD_REGISTER(ModelRegistry(), "resnet34", MakeResNet(false, {3, 4, 6, 3}), ResNetSpecs());
KD_REGISTER(ModelRegistry(), "resnet50", MakeResNet(true, {3, 4, 6, 3}), ResNetSpecs());
KD_REGISTER(ModelRegistry(), "resnet101", MakeResNet(true, {3, 4, 23, 3}), ResNetSpecs());
KD_REGISTER(ModelRegistry(), "resnet152", MakeResNet(true, {3, 8, 36, 3}), ResNetSpecs());
KD_REGISTER(ModelRegistry(), "wide_resnet50_2", MakeResNet(true, {3, 4, 6, 3}, 128), ResNetSpecs());
KD_REGISTER(ModelRegistry(), "wide_resnet101_2", MakeResNet(true, {3, 4, 23, 3}, 128),
            ResNetSpecs());

// HND/GHND's custom_resnet152 (torchdistill's models/custom/bottleneck/classification/resnet.py,
// sc2-benchmark's since): the bottleneck (encoder-decoder in place of conv1 ... layer2), then
// resnet152's children named in short_module_names, in resnet152's order, with a flatten before
// fc: torch.nn.Sequential(bottleneck, layer3, layer4, avgpool, flatten, fc) by default.
absl::StatusOr<std::unique_ptr<Model>> MakeCustomResNet152(const Kwargs& kwargs) {
  using models_internal::HndNaming;
  const std::vector<std::string> children = {"conv1",  "bn1",    "relu",   "maxpool", "layer1",
                                             "layer2", "layer3", "layer4", "avgpool", "fc"};
  KD_ASSIGN_OR_RETURN(models_internal::HndOptions options,
                      models_internal::ReadHndOptions(kwargs, "short_module_names", children));
  TorchvisionResNet resnet(/*bottleneck=*/true, std::vector<int64_t>{3, 8, 36, 3}, 64,
                           IntKwarg(kwargs, "num_classes"), /*zero_init_residual=*/false);
  const bool sc2bench = options.naming == HndNaming::kSc2bench;
  models_internal::Chain chain;
  chain->Append(sc2bench ? "bottleneck_layer" : "bottleneck",
                models_internal::HndBottleneck(models_internal::HndHead::kResNet152,
                                               options.bottleneck_channel,
                                               options.bottleneck_idx));
  const auto kept = [&](const std::string& name) {
    return models_internal::Contains(options.short_names, name);
  };
  if (kept("conv1")) chain->Append("conv1", resnet->conv1);
  if (kept("bn1")) chain->Append("bn1", resnet->bn1);
  if (kept("relu")) chain->Append("relu", resnet->relu);
  if (kept("maxpool")) chain->Append("maxpool", resnet->maxpool);
  for (int stage = 0; stage < 4; ++stage) {
    const std::string name = absl::StrCat("layer", stage + 1);
    if (kept(name)) chain->Append(name, resnet->stages[stage]);
  }
  if (kept("avgpool")) chain->Append("avgpool", resnet->avgpool);
  if (kept("fc")) {
    if (sc2bench) {
      chain->AppendFunction([](at::Tensor x) { return at::flatten(x, 1); });
    } else {
      chain->Append("flatten", nn::Flatten());
    }
    chain->Append("fc", resnet->fc);
  }
  return MakeNativeModel(chain.ptr());
}

std::vector<KwargSpec> CustomResNetSpecs() {
  std::vector<KwargSpec> specs = models_internal::HndSpecs(
      models_internal::HndHead::kResNet152, "short_module_names",
      {"layer3", "layer4", "avgpool", "fc"});
  specs.insert(specs.begin(), models_internal::ImageNetClassesSpec());
  return specs;
}
KD_REGISTER(ModelRegistry(), "custom_resnet152", MakeCustomResNet152, CustomResNetSpecs());

}  // namespace
}  // namespace kd
