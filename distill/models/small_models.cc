// Registered small models: "mlp", "lenet5" and "fashion_cnn" (see model_registry.h).
// Layers keep PyTorch's default initialization, as the same layers in Python would.
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include "absl/status/statusor.h"
#include "base/kwargs.h"
#include "distill/models/internal/kwargs_util.h"
#include "distill/models/model_registry.h"
#include "hooks/hook_point.h"
#include "hooks/native_model.h"

namespace kd {
namespace {

namespace nn = torch::nn;

// mlp: one hidden layer, fc -> relu -> dropout.
struct MlpBlockImpl : nn::Module {
  MlpBlockImpl(int64_t in, int64_t out, double p)
      : fc(register_module("fc", nn::Linear(in, out))),
        relu(register_module("relu", nn::ReLU())),
        dropout(register_module("dropout", nn::Dropout(p))) {}

  at::Tensor forward(at::Tensor x) { return Call(dropout, Call(relu, Call(fc, x))); }

  nn::Linear fc;
  nn::ReLU relu;
  nn::Dropout dropout;
};
TORCH_MODULE(MlpBlock);

// Flattens its input, then hidden.0, hidden.1, ... (MlpBlocks; none if `hidden` is empty), fc.
struct MlpImpl : nn::Module {
  MlpImpl(int64_t in_features, const std::vector<int64_t>& hidden_sizes, int64_t num_classes,
          double p) {
    int64_t in = in_features;
    if (!hidden_sizes.empty()) {
      hidden = register_module("hidden", HookedSequential());
      for (int64_t out : hidden_sizes) {
        hidden->push_back(MlpBlock(in, out, p));
        in = out;
      }
    }
    fc = register_module("fc", nn::Linear(in, num_classes));
  }

  at::Tensor forward(at::Tensor x) {
    x = at::flatten(x, 1);
    if (hidden) x = Call(hidden, x);
    return Call(fc, x);
  }

  HookedSequential hidden{nullptr};
  nn::Linear fc{nullptr};
};
TORCH_MODULE(Mlp);

absl::StatusOr<std::unique_ptr<Model>> MakeMlp(const Kwargs& kwargs) {
  return MakeNativeModel(Mlp(IntKwarg(kwargs, "in_features"), IntListKwarg(kwargs, "hidden"),
                             IntKwarg(kwargs, "num_classes"), NumberKwarg(kwargs, "dropout"))
                             .ptr());
}

// LeNet-5 (LeCun et al. 1998) for 28x28 inputs: the first convolution pads by 2, giving the
// classic 32x32 geometry; ReLU and max-pooling stand in for the original's scaled tanh and
// trainable subsampling. 61,706 parameters for 1 channel and 10 classes.
//   features:   0 conv 5x5 (in -> 6, pad 2), 1 relu, 2 maxpool 2, 3 conv 5x5 (6 -> 16), 4 relu,
//               5 maxpool 2                                           -> [N, 16, 5, 5]
//   classifier: 0 linear 400 -> 120, 1 relu, 2 linear 120 -> 84, 3 relu, 4 linear 84 -> classes
struct LeNet5Impl : nn::Module {
  LeNet5Impl(int64_t in_channels, int64_t num_classes)
      : features(register_module(
            "features", HookedSequential(
                            nn::Conv2d(nn::Conv2dOptions(in_channels, 6, 5).padding(2)), nn::ReLU(),
                            nn::MaxPool2d(2), nn::Conv2d(6, 16, 5), nn::ReLU(), nn::MaxPool2d(2)))),
        classifier(register_module(
            "classifier",
            HookedSequential(nn::Linear(16 * 5 * 5, 120), nn::ReLU(), nn::Linear(120, 84),
                             nn::ReLU(), nn::Linear(84, num_classes)))) {}

  at::Tensor forward(at::Tensor x) { return Call(classifier, at::flatten(Call(features, x), 1)); }

  HookedSequential features;
  HookedSequential classifier;
};
TORCH_MODULE(LeNet5);

absl::StatusOr<std::unique_ptr<Model>> MakeLeNet5(const Kwargs& kwargs) {
  return MakeNativeModel(
      LeNet5(IntKwarg(kwargs, "in_channels"), IntKwarg(kwargs, "num_classes")).ptr());
}

// conv 3x3 (no bias) -> BN -> ReLU, appended to `seq`.
void AppendConvBnRelu(HookedSequential& seq, int64_t in, int64_t out, int64_t stride = 1) {
  seq->push_back(nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)));
  seq->push_back(nn::BatchNorm2d(out));
  seq->push_back(nn::ReLU());
}

// fashion_cnn: a small VGG-style CNN for 28x28 inputs, w = width. The stem's stride keeps every
// 3x3 convolution off the full 28x28 grid, where a training step would cost ~3x more.
//   stem:   0 conv 3x3 stride 2 (in -> w), 1 BN, 2 ReLU                  -> [N, w, 14, 14]
//   layer1: 0 conv 3x3 (w -> w), 1 BN, 2 ReLU                            -> [N, w, 14, 14]
//   layer2: 0 conv 3x3 (w -> 2w), 1 BN, 2 ReLU, 3 maxpool 2, 4 conv 3x3 (2w -> 2w), 5 BN, 6 ReLU
//                                                                        -> [N, 2w, 7, 7]
//   head:   0 flatten, 1 dropout, 2 linear 2w*49 -> classes
struct FashionCnnImpl : nn::Module {
  FashionCnnImpl(int64_t width, int64_t num_classes, int64_t in_channels, double p) {
    HookedSequential s, l1, l2;
    AppendConvBnRelu(s, in_channels, width, /*stride=*/2);
    AppendConvBnRelu(l1, width, width);
    AppendConvBnRelu(l2, width, 2 * width);
    l2->push_back(nn::MaxPool2d(2));
    AppendConvBnRelu(l2, 2 * width, 2 * width);
    stem = register_module("stem", s);
    layer1 = register_module("layer1", l1);
    layer2 = register_module("layer2", l2);
    head = register_module("head", HookedSequential(nn::Flatten(), nn::Dropout(p),
                                                    nn::Linear(2 * width * 7 * 7, num_classes)));
  }

  at::Tensor forward(at::Tensor x) { return Call(head, Call(layer2, Call(layer1, Call(stem, x)))); }

  HookedSequential stem{nullptr};
  HookedSequential layer1{nullptr};
  HookedSequential layer2{nullptr};
  HookedSequential head{nullptr};
};
TORCH_MODULE(FashionCnn);

absl::StatusOr<std::unique_ptr<Model>> MakeFashionCnn(const Kwargs& kwargs) {
  return MakeNativeModel(FashionCnn(IntKwarg(kwargs, "width"), IntKwarg(kwargs, "num_classes"),
                                    IntKwarg(kwargs, "in_channels"), NumberKwarg(kwargs, "dropout"))
                             .ptr());
}

KD_REGISTER(ModelRegistry(), "mlp", MakeMlp,
            {{.name = "in_features",
              .type = KwargType::kInteger,
              .doc = "input features after flattening (784 for 28x28 grey images); required",
              .min = 1,
              .required = true},
             {.name = "hidden",
              .type = KwargType::kIntegerList,
              .doc = "widths of the hidden layers, in order ([] for none)",
              .default_value = std::vector<int64_t>{256, 128},
              .min = 1},
             models_internal::NumClassesSpec(),
             models_internal::DropoutSpec("after each hidden layer's ReLU")});

KD_REGISTER(ModelRegistry(), "lenet5", MakeLeNet5,
            {models_internal::InChannelsSpec(1), models_internal::NumClassesSpec()});

KD_REGISTER(ModelRegistry(), "fashion_cnn", MakeFashionCnn,
            {{.name = "width",
              .type = KwargType::kInteger,
              .doc = "channels of stem and layer1 (layer2 has twice as many)",
              .default_value = 16,
              .min = 1},
             models_internal::NumClassesSpec(),
             models_internal::InChannelsSpec(1),
             models_internal::DropoutSpec("before the head's linear layer")});

}  // namespace
}  // namespace kd
