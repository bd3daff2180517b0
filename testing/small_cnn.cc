#include "testing/small_cnn.h"

#include <ATen/ATen.h>

namespace kd {
namespace test {

namespace nn = torch::nn;

BlockImpl::BlockImpl(int64_t channels) {
  conv1 = register_module(
      "conv1", nn::Conv2d(nn::Conv2dOptions(channels, channels, 3).padding(1).bias(false)));
  bn1 = register_module("bn1", nn::BatchNorm2d(channels));
  relu = register_module("relu", nn::ReLU());
  conv2 = register_module(
      "conv2", nn::Conv2d(nn::Conv2dOptions(channels, channels, 3).padding(1).bias(false)));
  bn2 = register_module("bn2", nn::BatchNorm2d(channels));
}

at::Tensor BlockImpl::forward(at::Tensor x) {
  at::Tensor out = Call(relu, Call(bn1, Call(conv1, x)));
  out = Call(bn2, Call(conv2, out));
  return Call(relu, out + x);
}

SmallCnnImpl::SmallCnnImpl() {
  stem = register_module("stem", HookedSequential(nn::Conv2d(nn::Conv2dOptions(1, 8, 3).padding(1)),
                                                  nn::BatchNorm2d(8), nn::ReLU()));
  layer1 = register_module("layer1", HookedSequential(Block(8), Block(8)));
  down = register_module("down", nn::Conv2d(nn::Conv2dOptions(8, 16, 3).stride(2).padding(1)));
  layer2 = register_module("layer2", HookedSequential(Block(16)));
  pool = register_module("pool", nn::AdaptiveAvgPool2d(1));
  fc = register_module("fc", nn::Linear(16, 10));
}

at::Tensor SmallCnnImpl::forward(at::Tensor x) {
  x = Call(stem, x);
  x = Call(layer1, x);
  x = Call(layer2, Call(down, x));
  return Call(fc, at::flatten(Call(pool, x), 1));
}

DirectCallNetImpl::DirectCallNetImpl() {
  lin = register_module("lin", nn::Linear(4, 4));
  act = register_module("act", nn::Tanh());
}

at::Tensor DirectCallNetImpl::forward(at::Tensor x) {
  return Call(act, lin->forward(x));  // lin bypasses its hook point
}

}  // namespace test
}  // namespace kd
