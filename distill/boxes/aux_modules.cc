#include "distill/boxes/aux_modules.h"

#include <string>

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "distill/config/kwargs.h"
#include "distill/config/plugin_kinds.h"

namespace kd {
namespace {

int64_t Int(const Kwargs& kwargs, const char* name, int64_t fallback) {
  auto it = kwargs.find(name);
  return it == kwargs.end() || it->second.isNone() ? fallback : it->second.toInt();
}

bool Bool(const Kwargs& kwargs, const char* name, bool fallback) {
  auto it = kwargs.find(name);
  return it == kwargs.end() || it->second.isNone() ? fallback : it->second.toBool();
}

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

KD_REGISTER(
    AuxiliaryModuleRegistry(), "conv_connector",
    ([](const Kwargs& kwargs) -> absl::StatusOr<torch::nn::AnyModule> {
      const int64_t in = Int(kwargs, "in_channels", 0), out = Int(kwargs, "out_channels", 0);
      const int64_t k = Int(kwargs, "kernel_size", 1);
      const bool bn = Bool(kwargs, "batch_norm", true);
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
     {.name = "kernel_size", .type = KwargType::kInteger, .doc = "odd; 1 (same padding)", .min = 1},
     {.name = "batch_norm",
      .type = KwargType::kBool,
      .doc = "a BatchNorm2d after the conv (the conv then has no bias); true"}},
    [](const KwargsView& view) {
      auto it = view.kwargs.find("kernel_size");
      if (it != view.kwargs.end() && it->second.isInt() && it->second.toInt() % 2 == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("kernel_size must be odd (same padding keeps the "
                         "feature map's size), got ",
                         it->second.toInt()));
      }
      return absl::OkStatus();
    });

KD_REGISTER(AuxiliaryModuleRegistry(), "linear",
            ([](const Kwargs& kwargs) -> absl::StatusOr<torch::nn::AnyModule> {
              return torch::nn::AnyModule(
                  torch::nn::Linear(torch::nn::LinearOptions(Int(kwargs, "in_features", 0),
                                                             Int(kwargs, "out_features", 0))
                                        .bias(Bool(kwargs, "bias", true))));
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
             {.name = "bias", .type = KwargType::kBool, .doc = "true"}});

}  // namespace

Registry<AuxiliaryModuleFactory>& AuxiliaryModuleRegistry() {
  static Registry<AuxiliaryModuleFactory>* const registry =
      NewGlobalRegistry<AuxiliaryModuleFactory>(std::string(kAuxiliaryModuleKind));
  return *registry;
}

absl::StatusOr<torch::nn::AnyModule> MakeAuxiliaryModule(absl::string_view key,
                                                         const Kwargs& kwargs) {
  KD_ASSIGN_OR_RETURN(const AuxiliaryModuleFactory* factory, AuxiliaryModuleRegistry().Get(key));
  KD_RETURN_IF_ERROR(CheckPluginKwargValues(AuxiliaryModuleRegistry(), key, kwargs,
                                            absl::StrCat(kAuxiliaryModuleKind, " \"", key, "\"")));
  return (*factory)(kwargs);
}

}  // namespace kd
