// Registered CIFAR residual networks: "resnet20", "resnet32", "resnet44", "resnet56",
// "resnet110", "resnet1202" (He et al. 2016; torchdistill's CIFAR ResNets) and
// "wrn" (Zagoruyko & Komodakis 2016), with torchdistill's module paths and parameter names, so
// its state dicts load by name. Convolutions start from Kaiming-normal (fan_out) weights and
// batch norms from weight 1, bias 0, as in torchvision and torchdistill.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include <ATen/ATen.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/kwargs.h"
#include "distill/models/internal/kwargs_util.h"
#include "distill/models/model_registry.h"
#include "distill/models/torchdistill_model_rule.h"
#include "hooks/hook_point.h"
#include "hooks/native_model.h"

namespace kd {
namespace {

namespace nn = torch::nn;

nn::Conv2d Conv3x3(int64_t in, int64_t out, int64_t stride = 1) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

nn::Conv2d Conv1x1(int64_t in, int64_t out, int64_t stride = 1) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false));
}

// Kaiming-normal (fan_out, ReLU) convolution weights, as torchvision's ResNet starts from.
void InitConvolutions(nn::Module& root) {
  for (const std::shared_ptr<nn::Module>& module : root.modules(/*include_self=*/false)) {
    if (auto* conv = module->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(conv->weight, /*a=*/0, torch::kFanOut, torch::kReLU);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// ResNet-20/32/56 for CIFAR (He et al. 2016, section 4.2): a 3x3 stem of 16 channels, three
// stages of n BasicBlocks (16, 32, 64 channels at 32x32, 16x16, 8x8), global average pooling and
// a linear layer; depth 6n + 2.

// How a block whose shape changes (stride 2, more channels) carries its input forward.
enum class Shortcut {
  // Option B: 1x1 convolution (stride 2) + BN, as torchdistill, RepDistiller and torchvision
  // do; the parameter counts usually quoted for these nets (resnet20: 272,474) are this one's.
  kProjection,
  // Option A, the paper's choice for CIFAR: subsample by 2 and pad the new channels with
  // zeros; no parameters (resnet20: 269,722, as akamaster's pytorch_resnet_cifar10).
  kZeroPad,
};

// Option A's shortcut: x[:, :, ::2, ::2] with (out - in) zero channels added, half before and
// half after (akamaster's LambdaLayer).
struct ZeroPadShortcutImpl : nn::Module {
  ZeroPadShortcutImpl(int64_t in, int64_t out) : before((out - in) / 2), after(out - in - before) {}

  at::Tensor forward(at::Tensor x) {
    at::Tensor sub = x.slice(/*dim=*/2, 0, x.size(2), 2).slice(/*dim=*/3, 0, x.size(3), 2);
    return at::constant_pad_nd(sub, {0, 0, 0, 0, before, after}, 0);
  }

  int64_t before;
  int64_t after;
};
TORCH_MODULE(ZeroPadShortcut);

// torchvision's BasicBlock: conv1 -> bn1 -> relu -> conv2 -> bn2, plus the input (through
// downsample when the shape changes), then relu.
struct BasicBlockImpl : nn::Module {
  BasicBlockImpl(int64_t in, int64_t planes, int64_t stride, Shortcut shortcut)
      : conv1(register_module("conv1", Conv3x3(in, planes, stride))),
        bn1(register_module("bn1", nn::BatchNorm2d(planes))),
        relu(register_module("relu", nn::ReLU())),
        conv2(register_module("conv2", Conv3x3(planes, planes))),
        bn2(register_module("bn2", nn::BatchNorm2d(planes))) {
    if (stride == 1 && in == planes) return;
    if (shortcut == Shortcut::kProjection) {
      downsample = register_module(
          "downsample", HookedSequential(Conv1x1(in, planes, stride), nn::BatchNorm2d(planes)));
    } else {
      zero_pad = register_module("downsample", ZeroPadShortcut(in, planes));
    }
  }

  at::Tensor forward(at::Tensor x) {
    at::Tensor out = Call(relu, Call(bn1, Call(conv1, x)));
    out = Call(bn2, Call(conv2, out));
    at::Tensor identity = downsample ? Call(downsample, x) : zero_pad ? Call(zero_pad, x) : x;
    return Call(relu, out + identity);
  }

  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::ReLU relu;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  HookedSequential downsample{nullptr};  // option B, where the shape changes
  ZeroPadShortcut zero_pad{nullptr};     // option A, where the shape changes ("downsample")
};
TORCH_MODULE(BasicBlock);

// conv1 -> bn1 -> relu -> layer1 -> layer2 -> layer3 -> avgpool -> flatten -> fc.
struct CifarResNetImpl : nn::Module {
  CifarResNetImpl(int64_t blocks_per_stage, int64_t num_classes, int64_t in_channels,
                  Shortcut shortcut)
      : conv1(register_module("conv1", Conv3x3(in_channels, 16))),
        bn1(register_module("bn1", nn::BatchNorm2d(16))),
        relu(register_module("relu", nn::ReLU())) {
    int64_t in = 16;
    HookedSequential* layers[] = {&layer1, &layer2, &layer3};
    for (int stage = 0; stage < 3; ++stage) {
      const int64_t planes = int64_t{16} << stage;
      HookedSequential layer;
      for (int64_t i = 0; i < blocks_per_stage; ++i) {
        layer->push_back(BasicBlock(in, planes, i == 0 && stage > 0 ? 2 : 1, shortcut));
        in = planes;
      }
      *layers[stage] = register_module(absl::StrCat("layer", stage + 1), layer);
    }
    avgpool = register_module("avgpool", nn::AdaptiveAvgPool2d(1));
    fc = register_module("fc", nn::Linear(64, num_classes));
    InitConvolutions(*this);
  }

  at::Tensor forward(at::Tensor x) {
    x = Call(relu, Call(bn1, Call(conv1, x)));
    x = Call(layer3, Call(layer2, Call(layer1, x)));
    return Call(fc, at::flatten(Call(avgpool, x), 1));
  }

  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::ReLU relu;
  HookedSequential layer1{nullptr};
  HookedSequential layer2{nullptr};
  HookedSequential layer3{nullptr};
  nn::AdaptiveAvgPool2d avgpool{nullptr};
  nn::Linear fc{nullptr};
};
TORCH_MODULE(CifarResNet);

absl::StatusOr<std::unique_ptr<Model>> MakeCifarResNet(int64_t depth, const Kwargs& kwargs) {
  const Shortcut shortcut =
      StringKwarg(kwargs, "shortcut") == "zero_pad" ? Shortcut::kZeroPad : Shortcut::kProjection;
  return MakeNativeModel(CifarResNet((depth - 2) / 6, IntKwarg(kwargs, "num_classes"),
                                     IntKwarg(kwargs, "in_channels"), shortcut)
                             .ptr());
}

std::vector<KwargSpec> CifarResNetSpecs() {
  return {models_internal::NumClassesSpec(),
          models_internal::InChannelsSpec(3),
          {.name = "shortcut",
           .type = KwargType::kString,
           .doc = "where a block's shape changes: projection (option B, 1x1 conv + BN, as "
                  "torchdistill) or zero_pad (option A, parameter-free)",
           .default_value = "projection",
           .choices = {"projection", "zero_pad"}}};
}

// ---------------------------------------------------------------------------------------------
// WRN-depth-k (Zagoruyko & Komodakis 2016): a 3x3 stem of 16 channels, three stages of
// (depth - 4) / 6 pre-activation blocks of 16k, 32k, 64k channels, BN-ReLU, global average
// pooling, linear. Blocks compute as the authors' code (and RepDistiller's wrn.py):
//   o = relu(bn1(x)); y = conv2(dropout(relu(bn2(conv1(o))))); return y + shortcut(o or x)
// where the shortcut is a 1x1 convolution of o where the shape changes and x itself otherwise.
// torchdistill's WideBasicBlock has the same parameters but feeds x to the 1x1 convolution and
// drops out before bn2, so its trained weights load here but compute slightly differently.

struct WideBasicBlockImpl : nn::Module {
  WideBasicBlockImpl(int64_t in, int64_t planes, int64_t stride, double p)
      : bn1(register_module("bn1", nn::BatchNorm2d(in))),
        relu(register_module("relu", nn::ReLU())),
        conv1(register_module("conv1", Conv3x3(in, planes, stride))),
        dropout(register_module("dropout", nn::Dropout(p))),
        bn2(register_module("bn2", nn::BatchNorm2d(planes))),
        conv2(register_module("conv2", Conv3x3(planes, planes))) {
    if (stride != 1 || in != planes) {
      projection = register_module("shortcut", HookedSequential(Conv1x1(in, planes, stride)));
    } else {
      identity = register_module("shortcut", nn::Identity());
    }
  }

  at::Tensor forward(at::Tensor x) {
    at::Tensor o = Call(relu, Call(bn1, x));
    at::Tensor y = Call(relu, Call(bn2, Call(conv1, o)));
    y = Call(conv2, Call(dropout, y));
    return y + (projection ? Call(projection, o) : Call(identity, x));
  }

  nn::BatchNorm2d bn1;
  nn::ReLU relu;
  nn::Conv2d conv1;
  nn::Dropout dropout;
  nn::BatchNorm2d bn2;
  nn::Conv2d conv2;
  HookedSequential projection{nullptr};  // "shortcut" where the shape changes
  nn::Identity identity{nullptr};        // "shortcut" elsewhere
};
TORCH_MODULE(WideBasicBlock);

// conv1 -> layer1 -> layer2 -> layer3 -> bn1 -> relu -> avgpool -> flatten -> fc.
struct WideResNetImpl : nn::Module {
  WideResNetImpl(int64_t depth, int64_t k, double p, int64_t num_classes, int64_t in_channels)
      : conv1(register_module("conv1", Conv3x3(in_channels, 16))) {
    const int64_t blocks_per_stage = (depth - 4) / 6;
    int64_t in = 16;
    HookedSequential* layers[] = {&layer1, &layer2, &layer3};
    for (int stage = 0; stage < 3; ++stage) {
      const int64_t planes = (int64_t{16} << stage) * k;
      HookedSequential layer;
      for (int64_t i = 0; i < blocks_per_stage; ++i) {
        layer->push_back(WideBasicBlock(in, planes, i == 0 && stage > 0 ? 2 : 1, p));
        in = planes;
      }
      *layers[stage] = register_module(absl::StrCat("layer", stage + 1), layer);
    }
    bn1 = register_module("bn1", nn::BatchNorm2d(in));
    relu = register_module("relu", nn::ReLU());
    avgpool = register_module("avgpool", nn::AdaptiveAvgPool2d(1));
    fc = register_module("fc", nn::Linear(in, num_classes));
    InitConvolutions(*this);
  }

  at::Tensor forward(at::Tensor x) {
    x = Call(layer3, Call(layer2, Call(layer1, Call(conv1, x))));
    x = Call(relu, Call(bn1, x));
    return Call(fc, at::flatten(Call(avgpool, x), 1));
  }

  nn::Conv2d conv1;
  HookedSequential layer1{nullptr};
  HookedSequential layer2{nullptr};
  HookedSequential layer3{nullptr};
  nn::BatchNorm2d bn1{nullptr};
  nn::ReLU relu{nullptr};
  nn::AdaptiveAvgPool2d avgpool{nullptr};
  nn::Linear fc{nullptr};
};
TORCH_MODULE(WideResNet);

constexpr int64_t kWrnDepth = 16;
constexpr int64_t kWrnWidenFactor = 4;

absl::StatusOr<std::unique_ptr<Model>> MakeWideResNet(const Kwargs& kwargs) {
  return MakeNativeModel(WideResNet(IntKwarg(kwargs, "depth"), IntKwarg(kwargs, "widen_factor"),
                                    NumberKwarg(kwargs, "dropout"), IntKwarg(kwargs, "num_classes"),
                                    IntKwarg(kwargs, "in_channels"))
                             .ptr());
}

absl::Status CheckWrnDepth(const KwargsView& view) {
  const int64_t depth = IntKwarg(view.kwargs, "depth");
  if ((depth - 4) % 6 == 0) return absl::OkStatus();
  const int64_t below = depth - (depth - 4) % 6;  // >= 10: the spec's minimum passed
  return absl::InvalidArgumentError(absl::StrCat("kwarg \"depth\" must be 6n + 4 (10, 16, 22, ",
                                                 "28, 40, ...), got ", depth, "; try ", below,
                                                 " or ", below + 6));
}

KD_REGISTER(
    ModelRegistry(), "resnet20", [](const Kwargs& k) { return MakeCifarResNet(20, k); },
    CifarResNetSpecs());
KD_REGISTER(
    ModelRegistry(), "resnet32", [](const Kwargs& k) { return MakeCifarResNet(32, k); },
    CifarResNetSpecs());
KD_REGISTER(
    ModelRegistry(), "resnet44", [](const Kwargs& k) { return MakeCifarResNet(44, k); },
    CifarResNetSpecs());
KD_REGISTER(
    ModelRegistry(), "resnet56", [](const Kwargs& k) { return MakeCifarResNet(56, k); },
    CifarResNetSpecs());
KD_REGISTER(
    ModelRegistry(), "resnet110", [](const Kwargs& k) { return MakeCifarResNet(110, k); },
    CifarResNetSpecs());
KD_REGISTER(
    ModelRegistry(), "resnet1202", [](const Kwargs& k) { return MakeCifarResNet(1202, k); },
    CifarResNetSpecs());

KD_REGISTER(ModelRegistry(), "wrn", MakeWideResNet,
            {{.name = "depth",
              .type = KwargType::kInteger,
              .doc = "layers with weights, 6n + 4 (n blocks per stage)",
              .default_value = kWrnDepth,
              .min = 10},
             {.name = "widen_factor",
              .type = KwargType::kInteger,
              .doc = "k, the channel multiplier (16k, 32k, 64k per stage; WRN-16-4 by default)",
              .default_value = kWrnWidenFactor,
              .min = 1},
             models_internal::DropoutSpec("between a block's two convolutions"),
             models_internal::NumClassesSpec(),
             models_internal::InChannelsSpec(3)},
            CheckWrnDepth);

// torchdistill's Wide ResNets (torchdistill/models/classification/wide_resnet.py) are "wrn";
// its CIFAR ResNets have libkd's names already.
TorchdistillModelRule Wrn(int64_t depth, int64_t widen_factor) {
  return {.libkd_key = "wrn",
          .fixed = {{"depth", depth}, {"widen_factor", widen_factor}},
          .renamed = {{"dropout_p", "dropout"}}};
}
KD_REGISTER(TorchdistillModelRules(), "wide_resnet40_4", Wrn(40, 4), kAnyKwargs);
KD_REGISTER(TorchdistillModelRules(), "wide_resnet28_10", Wrn(28, 10), kAnyKwargs);
KD_REGISTER(TorchdistillModelRules(), "wide_resnet16_8", Wrn(16, 8), kAnyKwargs);
// torchdistill's wide_resnet(depth, k, dropout_p, num_classes): the depth and width given.
KD_REGISTER(TorchdistillModelRules(), "wide_resnet",
            (TorchdistillModelRule{.libkd_key = "wrn",
                                   .renamed = {{"k", "widen_factor"}, {"dropout_p", "dropout"}}}),
            kAnyKwargs);

}  // namespace
}  // namespace kd
