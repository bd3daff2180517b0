// Native twins of the TorchScript fixtures, built from libkd's hook points so every child runs
// through one. Module paths, registration order and parameters match make_fixtures.py, so a
// state file saved by Python loads into them.
//
//   auto net = std::make_shared<kd::test::SmallCnnImpl>();
//   std::unique_ptr<kd::Model> model = kd::MakeNativeModel(net);
#ifndef LIBKD_TESTING_SMALL_CNN_H_
#define LIBKD_TESTING_SMALL_CNN_H_

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include "hooks/hook_point.h"

namespace kd {
namespace test {

// make_fixtures.py's Block: conv-bn-relu-conv-bn plus the input, then relu (called twice).
struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t channels);
  at::Tensor forward(at::Tensor x);

  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::ReLU relu{nullptr};
  torch::nn::Conv2d conv2{nullptr};
  torch::nn::BatchNorm2d bn2{nullptr};
};
TORCH_MODULE(Block);

// make_fixtures.py's SmallCNN: 1x28x28 -> 10.
struct SmallCnnImpl : torch::nn::Module {
  SmallCnnImpl();
  at::Tensor forward(at::Tensor x);

  HookedSequential stem{nullptr};
  HookedSequential layer1{nullptr};
  torch::nn::Conv2d down{nullptr};
  HookedSequential layer2{nullptr};
  torch::nn::AdaptiveAvgPool2d pool{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(SmallCnn);

// Breaks the hook-point rule on purpose: calls `lin` through lin->forward.
struct DirectCallNetImpl : torch::nn::Module {
  DirectCallNetImpl();
  at::Tensor forward(at::Tensor x);

  torch::nn::Linear lin{nullptr};
  torch::nn::Tanh act{nullptr};
};
TORCH_MODULE(DirectCallNet);

}  // namespace test
}  // namespace kd

#endif  // LIBKD_TESTING_SMALL_CNN_H_
