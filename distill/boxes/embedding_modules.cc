// Auxiliary modules of torchdistill's methods (torchdistill/models/wrapper.py) that embed or
// project a recorded value for the loss that compares them, under torchdistill's class names,
// kwargs and state-dict names (method_modules.cc has the others):
//   Linear4CRD              CRD's embedding: linear, then L_power-normalized, for CRDLoss
//   Linear4CCKD             CCKD's embedding: a linear on the flattened value, for CCKDLoss
//   ChannelSimilarityEmbed  ICKD's embedding: 3x3 conv + batch norm, for ChSimLoss
//   SRDModelWrapper         SRD's projector: spatial mean, linear, batch norm
// with the import rules of the torchdistill wrappers that attach them.
#include <cstdint>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "base/kwargs.h"
#include "distill/boxes/aux_modules.h"
#include "distill/boxes/internal/method_module_specs.h"
#include "distill/boxes/torchdistill_aux_rule.h"

namespace kd {
namespace {

namespace nn = torch::nn;
using boxes_internal::Channels;

// torchdistill's SRDModelWrapper's projector: the map averaged over its last two dimensions,
// a linear if `out_features` > 0 (its linear_kwargs), then BatchNorm1d ("linear.*",
// "norm_layer.*").
class Projector4SrdImpl : public nn::Module {
 public:
  Projector4SrdImpl(int64_t in, int64_t out)
      : norm_layer_(register_module("norm_layer", nn::BatchNorm1d(out > 0 ? out : in))) {
    if (out > 0) linear_ = register_module("linear", nn::Linear(in, out));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor z = x.mean(-1).mean(-1);
    if (linear_) z = linear_->forward(z);
    return norm_layer_->forward(z);
  }

 private:
  nn::BatchNorm1d norm_layer_;
  nn::Linear linear_{nullptr};
};
TORCH_MODULE(Projector4Srd);

// torchdistill's Normalizer4CRD (Linear4CRD's trainable part): the flattened value through a
// linear, divided by its L_power norm over features ("linear.weight", "linear.bias").
class Normalizer4CrdImpl : public nn::Module {
 public:
  Normalizer4CrdImpl(int64_t in, int64_t out, double power)
      : linear_(register_module("linear", nn::Linear(in, out))), power_(power) {}
  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor z = linear_->forward(x.flatten(1));
    return z.div(z.pow(power_).sum(1, /*keepdim=*/true).pow(1.0 / power_));
  }

 private:
  nn::Linear linear_;
  double power_;
};
TORCH_MODULE(Normalizer4Crd);

// torchdistill's Linear4CCKD's linear, on the flattened value ("linear.weight", "linear.bias").
class Linear4CckdImpl : public nn::Module {
 public:
  Linear4CckdImpl(int64_t in, int64_t out)
      : linear_(register_module("linear", nn::Linear(in, out))) {}
  at::Tensor forward(const at::Tensor& x) { return linear_->forward(x.flatten(1)); }

 private:
  nn::Linear linear_;
};
TORCH_MODULE(Linear4Cckd);

// torchdistill's ChannelSimilarityEmbed: a bias-free 3x3 convolution (same padding) and a batch
// norm ("conv2d.weight", "l2norm.*").
class ChannelSimilarityEmbedImpl : public nn::Module {
 public:
  ChannelSimilarityEmbedImpl(int64_t in, int64_t out)
      : conv2d_(register_module("conv2d",
                                nn::Conv2d(nn::Conv2dOptions(in, out, 3).padding(1).bias(false)))),
        l2norm_(register_module("l2norm", nn::BatchNorm2d(out))) {}
  at::Tensor forward(const at::Tensor& x) { return l2norm_->forward(conv2d_->forward(x)); }

 private:
  nn::Conv2d conv2d_;
  nn::BatchNorm2d l2norm_;
};
TORCH_MODULE(ChannelSimilarityEmbed);

// torchdistill nests the linear's kwargs (linear_kwargs: {in_features, out_features}); they are
// flat here.
KD_REGISTER(AuxiliaryModuleRegistry(), "Linear4CRD",
            ([](const Kwargs& kwargs) -> absl::StatusOr<nn::AnyModule> {
              return nn::AnyModule(Normalizer4Crd(IntKwarg(kwargs, "in_features"),
                                                  IntKwarg(kwargs, "out_features"),
                                                  NumberKwarg(kwargs, "power")));
            }),
            {Channels("in_features", "the flattened value's size"),
             Channels("out_features", "the embedding's size (CRDLoss's input_size)"),
             PositiveNumberSpec("power", "the normalizing norm", 2.0)});
KD_REGISTER(AuxiliaryModuleRegistry(), "Linear4CCKD",
            ([](const Kwargs& kwargs) -> absl::StatusOr<nn::AnyModule> {
              return nn::AnyModule(
                  Linear4Cckd(IntKwarg(kwargs, "in_features"), IntKwarg(kwargs, "out_features")));
            }),
            {Channels("in_features", "the flattened value's size"),
             Channels("out_features", "the embedding's size")});
// torchdistill's wrappers of the two (//tools:import_torchdistill): the submodule their losses
// name, the value they run on, their linear's kwargs (whose bias libkd's always has).
KD_REGISTER(TorchdistillAuxRules(), "Linear4CCKD",
            TorchdistillAuxRule{.name = "linear",
                                .input_kwarg = "input_module",
                                .flattened = {"linear_kwargs"},
                                .true_by_default = {"bias"}},
            kAnyKwargs);
KD_REGISTER(TorchdistillAuxRules(), "Linear4CRD",
            TorchdistillAuxRule{.name = "normalizer",
                                .input_kwarg = "input_module_path",
                                .flattened = {"linear_kwargs"},
                                .true_by_default = {"bias"},
                                .unneeded = {"empty"}},
            kAnyKwargs);
KD_REGISTER(AuxiliaryModuleRegistry(), "ChannelSimilarityEmbed",
            ([](const Kwargs& kwargs) -> absl::StatusOr<nn::AnyModule> {
              return nn::AnyModule(ChannelSimilarityEmbed(IntKwarg(kwargs, "in_channels"),
                                                          IntKwarg(kwargs, "out_channels")));
            }),
            {{.name = "in_channels",
              .type = KwargType::kInteger,
              .doc = "the feature map's channels",
              .default_value = int64_t{512},
              .min = 1},
             {.name = "out_channels",
              .type = KwargType::kInteger,
              .doc = "the embedding's channels",
              .default_value = int64_t{128},
              .min = 1}});

KD_REGISTER(AuxiliaryModuleRegistry(), "SRDModelWrapper",
            ([](const Kwargs& kwargs) -> absl::StatusOr<nn::AnyModule> {
              return nn::AnyModule(
                  Projector4Srd(IntKwarg(kwargs, "in_features"), IntKwarg(kwargs, "out_features")));
            }),
            {Channels("in_features", "the map's channels"),
             {.name = "out_features",
              .type = KwargType::kInteger,
              .doc = "the linear's output (its linear_kwargs); 0: no linear",
              .default_value = int64_t{0},
              .min = 0}});
// torchdistill's SRDModelWrapper computes its projector in a secondary forward and keeps nothing
// of it: its SRDLoss reads the model's own features and logits.
KD_REGISTER(TorchdistillAuxRules(), "SRDModelWrapper",
            TorchdistillAuxRule{
                .left_out = "its projector's output is read by nothing (torchdistill "
                            "1.1.5's SRDModelWrapper computes and drops it; "
                            "SRDLoss reads the model's own features)"},
            kAnyKwargs);
// torchdistill's Student4ICKD: a ChannelSimilarityEmbed per embeddings entry on the student's
// value the entry names.
KD_REGISTER(TorchdistillAuxRules(), "Student4ICKD",
            TorchdistillAuxRule{.model_prefix = "student_model.",
                                .modules_kwarg = "embeddings",
                                .module_key = "ChannelSimilarityEmbed",
                                .module_path_prefix = "embed_dict."},
            kAnyKwargs);

}  // namespace
}  // namespace kd
