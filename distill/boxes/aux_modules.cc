#include "distill/boxes/aux_modules.h"

#include <string>

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "absl/strings/str_cat.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "distill/config/kwargs.h"
#include "distill/config/plugin_kinds.h"

namespace kd {
namespace {

// conv (k x k, same padding) then batch norm: "conv.weight", "bn.weight", ...
class ConvConnectorImpl : public torch::nn::Module {
 public:
  ConvConnectorImpl(int64_t in, int64_t out, int64_t k, bool batch_norm)
      : conv_(register_module(
            "conv", torch::nn::Conv2d(
                        torch::nn::Conv2dOptions(in, out, k).padding(k / 2).bias(!batch_norm)))) {
    if (batch_norm) bn_ = register_module("bn", torch::nn::BatchNorm2d(out));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor y = conv_(x);
    return bn_.is_empty() ? y : bn_(y);
  }

 private:
  torch::nn::Conv2d conv_;
  torch::nn::BatchNorm2d bn_{nullptr};
};
TORCH_MODULE(ConvConnector);

KD_REGISTER(AuxiliaryModuleRegistry(), "conv_connector",
            ([](const Kwargs& kwargs) -> absl::StatusOr<torch::nn::AnyModule> {
              const int64_t in = IntKwarg(kwargs, "in_channels"),
                            out = IntKwarg(kwargs, "out_channels");
              const int64_t k = IntKwarg(kwargs, "kernel_size");
              const bool bn = BoolKwarg(kwargs, "batch_norm");
              return torch::nn::AnyModule(ConvConnector(in, out, k, bn));
            }),
            {{.name = "in_channels",
              .type = KwargType::kInteger,
              .doc = "the input's channels",
              .min = 1,
              .required = true},
             {.name = "out_channels",
              .type = KwargType::kInteger,
              .doc = "the output's channels",
              .min = 1,
              .required = true},
             {.name = "kernel_size",
              .type = KwargType::kInteger,
              .doc = "odd (same padding)",
              .default_value = 1,
              .min = 1},
             {.name = "batch_norm",
              .type = KwargType::kBool,
              .doc = "a BatchNorm2d after the conv (the conv then has no bias)",
              .default_value = true}},
            [](const KwargsView& view) {
              if (const int64_t k = IntKwarg(view.kwargs, "kernel_size"); k % 2 == 0) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "kernel_size must be odd (same padding keeps the feature map's size), got ",
                    k));
              }
              return absl::OkStatus();
            });

// torchdistill's ConvReg adaptation (models/adaptation.py; CRD's FitNet regressor): a conv with
// bias, its stride and padding as given, batch norm, then ReLU unless uses_relu is false
// ("conv.weight", "conv.bias", "bn.*": torchdistill's names).
class ConvRegImpl : public torch::nn::Module {
 public:
  ConvRegImpl(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t padding, bool relu)
      : conv_(register_module(
            "conv", torch::nn::Conv2d(
                        torch::nn::Conv2dOptions(in, out, k).stride(stride).padding(padding)))),
        bn_(register_module("bn", torch::nn::BatchNorm2d(out))),
        relu_(relu) {}
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor y = bn_(conv_(x));
    return relu_ ? y.relu() : y;
  }

 private:
  torch::nn::Conv2d conv_;
  torch::nn::BatchNorm2d bn_;
  bool relu_;
};
TORCH_MODULE(ConvReg);

KD_REGISTER(
    AuxiliaryModuleRegistry(), "ConvReg",
    ([](const Kwargs& kwargs) -> absl::StatusOr<torch::nn::AnyModule> {
      return torch::nn::AnyModule(
          ConvReg(IntKwarg(kwargs, "num_input_channels"), IntKwarg(kwargs, "num_output_channels"),
                  IntKwarg(kwargs, "kernel_size"), IntKwarg(kwargs, "stride"),
                  IntKwarg(kwargs, "padding"), BoolKwarg(kwargs, "uses_relu")));
    }),
    {{.name = "num_input_channels",
      .type = KwargType::kInteger,
      .doc = "the input's channels",
      .min = 1,
      .required = true},
     {.name = "num_output_channels",
      .type = KwargType::kInteger,
      .doc = "the output's channels",
      .min = 1,
      .required = true},
     {.name = "kernel_size",
      .type = KwargType::kInteger,
      .doc = "the conv's kernel size",
      .min = 1,
      .required = true},
     {.name = "stride",
      .type = KwargType::kInteger,
      .doc = "the conv's stride",
      .min = 1,
      .required = true},
     {.name = "padding",
      .type = KwargType::kInteger,
      .doc = "the conv's zero padding",
      .min = 0,
      .required = true},
     {.name = "uses_relu", .type = KwargType::kBool, .doc = "a ReLU last", .default_value = true}});

KD_REGISTER(
    AuxiliaryModuleRegistry(), "linear",
    ([](const Kwargs& kwargs) -> absl::StatusOr<torch::nn::AnyModule> {
      return torch::nn::AnyModule(
          torch::nn::Linear(torch::nn::LinearOptions(IntKwarg(kwargs, "in_features"),
                                                     IntKwarg(kwargs, "out_features"))
                                .bias(BoolKwarg(kwargs, "bias"))));
    }),
    {{.name = "in_features",
      .type = KwargType::kInteger,
      .doc = "the input's last dim",
      .min = 1,
      .required = true},
     {.name = "out_features",
      .type = KwargType::kInteger,
      .doc = "the output's last dim",
      .min = 1,
      .required = true},
     {.name = "bias", .type = KwargType::kBool, .doc = "an additive bias", .default_value = true}});

}  // namespace

Registry<AuxiliaryModuleFactory>& AuxiliaryModuleRegistry() {
  static Registry<AuxiliaryModuleFactory>* const registry =
      NewGlobalRegistry<AuxiliaryModuleFactory>(std::string(kAuxiliaryModuleKind));
  return *registry;
}

absl::StatusOr<torch::nn::AnyModule> MakeAuxiliaryModule(absl::string_view key,
                                                         const Kwargs& kwargs) {
  KD_ASSIGN_OR_RETURN(const AuxiliaryModuleFactory* factory, AuxiliaryModuleRegistry().Get(key));
  KD_ASSIGN_OR_RETURN(const Kwargs resolved,
                      ResolvePluginKwargs(AuxiliaryModuleRegistry(), key, kwargs,
                                          absl::StrCat(kAuxiliaryModuleKind, " \"", key, "\"")));
  return (*factory)(resolved);
}

}  // namespace kd
