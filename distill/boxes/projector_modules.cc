// silverspoon-kd's projectors as auxiliary modules under its class names: GenericLinearProjector
// (nn.Linear over the last dimension, bias by default) and GenericConv2dProjector (a 1x1
// nn.Conv2d over the channels, no bias by default). Their parameters are "weight" and "bias" as
// in silverspoon-kd's (nn.Linear and nn.Conv2d subclasses), and torch's default initialization
// draws the same numbers from the same generator state as PyTorch's (kaiming_uniform_(a=sqrt(5))
// weights, uniform(+-1/sqrt(fan_in)) biases); `init` gives silverspoon-kd's projector_init.
#include <cmath>
#include <cstdint>
#include <string>

#include <torch/nn/init.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "absl/status/statusor.h"
#include "base/kwargs.h"
#include "base/registry.h"
#include "distill/boxes/aux_modules.h"

namespace kd {
namespace {

// silverspoon-kd's Alignment._apply_projector_init: "normal" is normal(0, 0.02) weights,
// "xavier" Xavier-uniform, both with zero biases (nn.Linear modules only: its 1x1 convolutions
// keep torch's default).
void ApplyInit(const std::string& init, at::Tensor& weight, at::Tensor& bias) {
  if (init.empty()) return;
  torch::NoGradGuard no_grad;
  if (init == "normal") {
    torch::nn::init::normal_(weight, 0.0, 0.02);
  } else {
    torch::nn::init::xavier_uniform_(weight);
  }
  if (bias.defined()) torch::nn::init::zeros_(bias);
}

KwargSpec InitSpec() {
  return {.name = "init",
          .type = KwargType::kString,
          .doc = "silverspoon-kd's projector_init: \"\" torch's default, \"normal\" or \"xavier\"",
          .default_value = std::string(),
          .choices = {"", "normal", "xavier"}};
}

KwargSpec Width(const char* name, const char* doc) {
  return {.name = name, .type = KwargType::kInteger, .doc = doc, .min = 1, .required = true};
}

KD_REGISTER(AuxiliaryModuleRegistry(), "GenericLinearProjector",
            ([](const Kwargs& kwargs) -> absl::StatusOr<torch::nn::AnyModule> {
              torch::nn::Linear linear(torch::nn::LinearOptions(IntKwarg(kwargs, "in_features"),
                                                                IntKwarg(kwargs, "out_features"))
                                           .bias(BoolKwarg(kwargs, "bias")));
              ApplyInit(StringKwarg(kwargs, "init"), linear->weight, linear->bias);
              return torch::nn::AnyModule(linear);
            }),
            {Width("in_features", "the student value's last dimension"),
             Width("out_features", "the teacher value's last dimension"),
             {.name = "bias", .type = KwargType::kBool, .doc = "a bias", .default_value = true},
             InitSpec()});

KD_REGISTER(AuxiliaryModuleRegistry(), "GenericConv2dProjector",
            ([](const Kwargs& kwargs) -> absl::StatusOr<torch::nn::AnyModule> {
              torch::nn::Conv2d conv(torch::nn::Conv2dOptions(IntKwarg(kwargs, "in_channels"),
                                                              IntKwarg(kwargs, "out_channels"), 1)
                                         .bias(BoolKwarg(kwargs, "bias")));
              // No `init`: silverspoon-kd's projector_init changes nn.Linear modules only.
              return torch::nn::AnyModule(conv);
            }),
            {Width("in_channels", "the student value's channels"),
             Width("out_channels", "the teacher value's channels"),
             {.name = "bias", .type = KwargType::kBool, .doc = "a bias", .default_value = false}});

}  // namespace
}  // namespace kd
