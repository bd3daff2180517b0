// Registered DenseNets: torchvision's densenet121, densenet161, densenet169, densenet201 (the
// ImageNet stem: conv0 7x7 stride 2, norm0, relu0, pool0), and DenseNet-BC for CIFAR
// (Huang et al. 2017) as torchdistill defines it
// (torchdistill/models/classification/densenet.py, DenseNet4Cifar on torchvision's _DenseBlock
// and _Transition): "densenet_bc_k12_depth100", "densenet_bc_k24_depth250",
// "densenet_bc_k40_depth190", with torchdistill's module paths and parameter names
// (features.conv0, features.denseblockN.denselayerM.{norm1,conv1,norm2,conv2},
// features.transitionN.{norm,conv,pool}, features.norm5, classifier), so its state dicts load by
// name. A 3x3 stem of 2k channels, three dense blocks of (depth - 4) / 6 bottleneck layers
// (BN-ReLU-1x1 conv to 4k, BN-ReLU-3x3 conv to k, concatenated to the block's input), each
// but the last followed by a transition halving channels and size (BN-ReLU-1x1 conv, 2x2 average
// pooling), then BN, ReLU, global average pooling and a linear layer. Weights start as
// torchdistill's: Kaiming-normal convolutions (fan_in), batch norms 1 and 0, linear biases 0.
//
// One difference in what hooks see: torchvision's _DenseLayer takes the list of the earlier
// features and concatenates them itself; here the block concatenates them and the layer takes the
// one tensor, so a dense layer's recorded input is that concatenation (its output is the same).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/autograd.h>
#include <torch/nn/functional/dropout.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include "absl/status/status.h"
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

struct DenseLayerImpl;

// The dense layer a checkpointed bottleneck recomputes in backward.
struct LayerHandle : torch::CustomClassHolder {
  explicit LayerHandle(DenseLayerImpl* layer) : layer(layer) {}
  DenseLayerImpl* layer;
};

// torchvision's memory_efficient (torch.utils.checkpoint of the bottleneck): forward keeps only
// the bottleneck's input; backward runs norm1 -> relu1 -> conv1 again with autograd on (in
// training mode, so norm1's running statistics are updated a second time, as torchvision's) and
// takes the gradients of its input and of those three modules' parameters.
struct CheckpointedBottleneck : torch::autograd::Function<CheckpointedBottleneck> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor concatenated,
                            at::Tensor norm_weight, at::Tensor norm_bias, at::Tensor conv_weight,
                            c10::IValue handle);
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_output);
};

// torchvision's _DenseLayer: norm1 -> relu1 -> conv1 (1x1, bn_size * k) -> norm2 -> relu2 ->
// conv2 (3x3, k), then dropout in training where drop_rate > 0.
struct DenseLayerImpl : nn::Module {
  DenseLayerImpl(int64_t in, int64_t growth, int64_t bn_size, double drop_rate,
                 bool memory_efficient)
      : norm1(register_module("norm1", nn::BatchNorm2d(in))),
        relu1(register_module("relu1", nn::ReLU())),
        conv1(register_module("conv1",
                              nn::Conv2d(nn::Conv2dOptions(in, bn_size * growth, 1).bias(false)))),
        norm2(register_module("norm2", nn::BatchNorm2d(bn_size * growth))),
        relu2(register_module("relu2", nn::ReLU())),
        conv2(register_module(
            "conv2",
            nn::Conv2d(nn::Conv2dOptions(bn_size * growth, growth, 3).padding(1).bias(false)))),
        drop_rate(drop_rate),
        memory_efficient(memory_efficient) {}

  at::Tensor Bottleneck(const at::Tensor& concatenated) {
    return Call(conv1, Call(relu1, Call(norm1, concatenated)));
  }

  at::Tensor forward(at::Tensor concatenated) {
    // As torchvision's: checkpointed where the input needs a gradient.
    at::Tensor bottleneck =
        memory_efficient && concatenated.requires_grad() && at::GradMode::is_enabled()
            ? CheckpointedBottleneck::apply(
                  concatenated, norm1->weight, norm1->bias, conv1->weight,
                  c10::IValue::make_capsule(c10::make_intrusive<LayerHandle>(this)))
            : Bottleneck(concatenated);
    at::Tensor out = Call(conv2, Call(relu2, Call(norm2, bottleneck)));
    if (drop_rate > 0) {
      out = nn::functional::dropout(
          out, nn::functional::DropoutFuncOptions().p(drop_rate).training(is_training()));
    }
    return out;
  }

  nn::BatchNorm2d norm1;
  nn::ReLU relu1;
  nn::Conv2d conv1;
  nn::BatchNorm2d norm2;
  nn::ReLU relu2;
  nn::Conv2d conv2;
  double drop_rate;
  bool memory_efficient;
};
TORCH_MODULE(DenseLayer);

at::Tensor CheckpointedBottleneck::forward(torch::autograd::AutogradContext* ctx,
                                           at::Tensor concatenated, at::Tensor norm_weight,
                                           at::Tensor norm_bias, at::Tensor conv_weight,
                                           c10::IValue handle) {
  ctx->save_for_backward({concatenated});
  ctx->saved_data["layer"] = handle;
  auto* layer = static_cast<LayerHandle*>(handle.toCapsule().get())->layer;
  return layer->Bottleneck(concatenated);
}

torch::autograd::variable_list CheckpointedBottleneck::backward(
    torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grad_output) {
  auto* layer = static_cast<LayerHandle*>(ctx->saved_data["layer"].toCapsule().get())->layer;
  const at::Tensor saved = ctx->get_saved_variables()[0];
  at::AutoGradMode grad_mode(true);
  const at::Tensor input = saved.detach().requires_grad_(true);
  const at::Tensor out = layer->Bottleneck(input);
  const std::vector<at::Tensor> wrt = {input, layer->norm1->weight, layer->norm1->bias,
                                       layer->conv1->weight};
  torch::autograd::variable_list grads = torch::autograd::grad(
      {out}, wrt, {grad_output[0]}, /*retain_graph=*/false, /*create_graph=*/false,
      /*allow_unused=*/true);
  grads.push_back(at::Tensor());  // the handle
  return grads;
}

// torchvision's _DenseBlock: each layer takes the concatenation of the block's input and the
// earlier layers' outputs; the block returns the concatenation of all.
struct DenseBlockImpl : nn::Module {
  DenseBlockImpl(int64_t layers, int64_t in, int64_t bn_size, int64_t growth, double drop_rate,
                 bool memory_efficient) {
    for (int64_t i = 0; i < layers; ++i) {
      this->layers.push_back(
          register_module(absl::StrCat("denselayer", i + 1),
                          DenseLayer(in + i * growth, growth, bn_size, drop_rate,
                                     memory_efficient)));
    }
  }

  at::Tensor forward(at::Tensor x) {
    std::vector<at::Tensor> features = {x};
    for (DenseLayer& layer : layers) features.push_back(Call(layer, at::cat(features, 1)));
    return at::cat(features, 1);
  }

  std::vector<DenseLayer> layers;
};
TORCH_MODULE(DenseBlock);

// torchvision's _Transition: norm -> relu -> conv (1x1, half the channels) -> pool (2x2 average).
struct TransitionImpl : nn::Module {
  explicit TransitionImpl(int64_t channels)
      : norm(register_module("norm", nn::BatchNorm2d(channels))),
        relu(register_module("relu", nn::ReLU())),
        conv(register_module("conv",
                             nn::Conv2d(nn::Conv2dOptions(channels, channels / 2, 1).bias(false)))),
        pool(register_module("pool", nn::AvgPool2d(nn::AvgPool2dOptions(2).stride(2)))) {}

  at::Tensor forward(at::Tensor x) { return Call(pool, Call(conv, Call(relu, Call(norm, x)))); }

  nn::BatchNorm2d norm;
  nn::ReLU relu;
  nn::Conv2d conv;
  nn::AvgPool2d pool;
};
TORCH_MODULE(Transition);

// features (conv0, denseblock1, transition1, denseblock2, transition2, denseblock3, norm5) ->
// relu -> global average pooling -> flatten -> classifier.
struct DenseNetCifarImpl : nn::Module {
  // `blocks`: the layers of each dense block. `imagenet_stem`: torchvision's (conv0 7x7 stride 2,
  // norm0, relu0, pool0 3x3 stride 2) instead of the CIFAR 3x3 convolution.
  DenseNetCifarImpl(int64_t growth, std::vector<int64_t> blocks, int64_t init_features,
                    int64_t bn_size, double drop_rate, int64_t num_classes, bool imagenet_stem,
                    bool memory_efficient = false) {
    int64_t channels = init_features;
    HookedSequential stack;
    if (imagenet_stem) {
      stack->push_back(
          "conv0", nn::Conv2d(nn::Conv2dOptions(3, channels, 7).stride(2).padding(3).bias(false)));
      stack->push_back("norm0", nn::BatchNorm2d(channels));
      stack->push_back("relu0", nn::ReLU());
      stack->push_back("pool0", nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)));
    } else {
      stack->push_back("conv0",
                       nn::Conv2d(nn::Conv2dOptions(3, channels, 3).padding(1).bias(false)));
    }
    for (size_t block = 1; block <= blocks.size(); ++block) {
      const int64_t layers = blocks[block - 1];
      stack->push_back(absl::StrCat("denseblock", block),
                       DenseBlock(layers, channels, bn_size, growth, drop_rate,
                                  memory_efficient));
      channels += layers * growth;
      if (block == blocks.size()) break;
      stack->push_back(absl::StrCat("transition", block), Transition(channels));
      channels /= 2;
    }
    stack->push_back("norm5", nn::BatchNorm2d(channels));
    features = register_module("features", stack);
    classifier = register_module("classifier", nn::Linear(channels, num_classes));
    for (const std::shared_ptr<nn::Module>& module : modules(/*include_self=*/false)) {
      if (auto* conv = module->as<nn::Conv2d>()) {
        nn::init::kaiming_normal_(conv->weight);
      } else if (auto* linear = module->as<nn::Linear>()) {
        nn::init::zeros_(linear->bias);
      }
    }
  }

  at::Tensor forward(at::Tensor x) {
    at::Tensor out = at::relu(Call(features, x));
    return Call(classifier, at::flatten(at::adaptive_avg_pool2d(out, {1, 1}), 1));
  }

  HookedSequential features{nullptr};
  nn::Linear classifier{nullptr};
};
TORCH_MODULE(DenseNetCifar);

// The blocks run on their own (a torchdistill `sequential` of features' children).
const bool kBlocksRunAlone = [] {
  RegisterNativeModuleForward<DenseBlockImpl>();
  RegisterNativeModuleForward<DenseLayerImpl>();
  RegisterNativeModuleForward<TransitionImpl>();
  return true;
}();

// torchdistill's densenet(growth_rate, depth, num_init_features, bottleneck=True, ...).
auto MakeDenseNetBc(int64_t growth, int64_t depth) {
  return [growth, depth](const Kwargs& kwargs) -> absl::StatusOr<std::unique_ptr<Model>> {
    const int64_t layers = (depth - 4) / 6;
    return MakeNativeModel(DenseNetCifar(growth, std::vector<int64_t>{layers, layers, layers},
                                         2 * growth, IntKwarg(kwargs, "bn_size"),
                                         NumberKwarg(kwargs, "drop_rate"),
                                         IntKwarg(kwargs, "num_classes"), /*imagenet_stem=*/false,
                                         BoolKwarg(kwargs, "memory_efficient"))
                               .ptr());
  };
}

// torchvision's densenet121/161/169/201.
auto MakeTorchvisionDenseNet(int64_t growth, std::vector<int64_t> blocks, int64_t init) {
  return [=](const Kwargs& kwargs) -> absl::StatusOr<std::unique_ptr<Model>> {
    return MakeNativeModel(DenseNetCifar(growth, blocks, init, IntKwarg(kwargs, "bn_size"),
                                         NumberKwarg(kwargs, "drop_rate"),
                                         IntKwarg(kwargs, "num_classes"), /*imagenet_stem=*/true,
                                         BoolKwarg(kwargs, "memory_efficient"))
                               .ptr());
  };
}

std::vector<KwargSpec> DenseNetSpecs() {
  return {models_internal::NumClassesSpec(),
          {.name = "bn_size",
           .type = KwargType::kInteger,
           .doc = "a bottleneck's width in multiples of the growth rate",
           .default_value = 4,
           .min = 1},
          {.name = "memory_efficient",
           .type = KwargType::kBool,
           .doc = "torchvision's checkpointed bottlenecks: recomputed in backward (less memory; "
                  "norm1's running statistics updated twice, as torchvision's)",
           .default_value = false},
          {.name = "drop_rate",
           .type = KwargType::kNumber,
           .doc = "dropout probability after each dense layer (0: none)",
           .default_value = 0.0,
           .min = 0,
           .max = 1,
           .max_exclusive = true}};
}

std::vector<KwargSpec> TorchvisionDenseNetSpecs() {
  std::vector<KwargSpec> specs = DenseNetSpecs();
  specs[0] = models_internal::ImageNetClassesSpec();
  return specs;
}

KD_REGISTER(ModelRegistry(), "densenet_bc_k12_depth100", MakeDenseNetBc(12, 100), DenseNetSpecs());
KD_REGISTER(ModelRegistry(), "densenet_bc_k24_depth250", MakeDenseNetBc(24, 250), DenseNetSpecs());
KD_REGISTER(ModelRegistry(), "densenet_bc_k40_depth190", MakeDenseNetBc(40, 190), DenseNetSpecs());
KD_REGISTER(ModelRegistry(), "densenet121", MakeTorchvisionDenseNet(32, {6, 12, 24, 16}, 64),
            TorchvisionDenseNetSpecs());
KD_REGISTER(ModelRegistry(), "densenet161", MakeTorchvisionDenseNet(48, {6, 12, 36, 24}, 96),
            TorchvisionDenseNetSpecs());
KD_REGISTER(ModelRegistry(), "densenet169", MakeTorchvisionDenseNet(32, {6, 12, 32, 32}, 64),
            TorchvisionDenseNetSpecs());
KD_REGISTER(ModelRegistry(), "densenet201", MakeTorchvisionDenseNet(32, {6, 12, 48, 32}, 64),
            TorchvisionDenseNetSpecs());

// HND/GHND's custom_densenet169 and custom_densenet201 (torchdistill's
// models/custom/bottleneck/classification/densenet.py, sc2-benchmark's since): the bottleneck in
// place of the features up to transition2, then the features named in short_feature_names in the
// original's order, ReLU, global average pooling and the classifier. torchdistill's names:
// features.bottleneck, features.denseblock3, ..., relu, adaptive_avgpool, classifier;
// sc2-benchmark's: bottleneck_layer, features.denseblock3, ..., relu, avgpool, classifier.
struct CustomDenseNetImpl : nn::Module {
  CustomDenseNetImpl(DenseNetCifar org, const models_internal::HndOptions& options) {
    const bool sc2bench = options.naming == models_internal::HndNaming::kSc2bench;
    models_internal::HndBottleneck head(models_internal::HndHead::kDenseNet,
                                        options.bottleneck_channel, options.bottleneck_idx);
    HookedSequential kept;
    if (sc2bench) {
      bottleneck_layer = register_module("bottleneck_layer", head);
    } else {
      kept->push_back("bottleneck", head);
    }
    const auto names = org->features->named_children().keys();
    size_t i = 0;
    for (const nn::AnyModule& child : *org->features) {
      if (models_internal::Contains(options.short_names, names[i])) {
        kept->push_back(names[i], child);
      }
      ++i;
    }
    if (!kept->is_empty()) features = register_module("features", kept);
    relu = register_module("relu", nn::ReLU());
    avgpool = register_module(sc2bench ? "avgpool" : "adaptive_avgpool", nn::AdaptiveAvgPool2d(1));
    classifier = register_module("classifier", org->classifier);
  }

  at::Tensor forward(at::Tensor x) {
    if (bottleneck_layer) x = Call(bottleneck_layer, x);
    if (features) x = Call(features, x);
    x = Call(avgpool, Call(relu, x));
    return Call(classifier, at::flatten(x, 1));
  }

  models_internal::HndBottleneck bottleneck_layer{nullptr};
  HookedSequential features{nullptr};
  nn::ReLU relu{nullptr};
  nn::AdaptiveAvgPool2d avgpool{nullptr};
  nn::Linear classifier{nullptr};
};
TORCH_MODULE(CustomDenseNet);

auto MakeCustomDenseNet(std::vector<int64_t> blocks) {
  return [=](const Kwargs& kwargs) -> absl::StatusOr<std::unique_ptr<Model>> {
    const std::vector<std::string> children = {
        "conv0",       "norm0",       "relu0",       "pool0",       "denseblock1", "transition1",
        "denseblock2", "transition2", "denseblock3", "transition3", "denseblock4", "norm5",
        "classifier"};  // torchdistill drops "classifier" from the set: it is always kept
    KD_ASSIGN_OR_RETURN(
        models_internal::HndOptions options,
        models_internal::ReadHndOptions(kwargs, "short_feature_names", children));
    DenseNetCifar org(32, blocks, 64, 4, 0.0, IntKwarg(kwargs, "num_classes"),
                      /*imagenet_stem=*/true);
    return MakeNativeModel(CustomDenseNet(org, options).ptr());
  };
}

std::vector<KwargSpec> CustomDenseNetSpecs() {
  std::vector<KwargSpec> specs = models_internal::HndSpecs(
      models_internal::HndHead::kDenseNet, "short_feature_names",
      {"denseblock3", "transition3", "denseblock4", "norm5"});
  specs.insert(specs.begin(), TorchvisionDenseNetSpecs()[0]);  // num_classes
  return specs;
}
KD_REGISTER(ModelRegistry(), "custom_densenet169", MakeCustomDenseNet({6, 12, 32, 32}),
            CustomDenseNetSpecs());
KD_REGISTER(ModelRegistry(), "custom_densenet201", MakeCustomDenseNet({6, 12, 48, 32}),
            CustomDenseNetSpecs());

}  // namespace
}  // namespace kd
