// Auxiliary modules of torchdistill's methods (its torchdistill/models/wrapper.py), under its
// class names, with its kwargs and its state-dict names, so that its trained modules load:
//   Regressor4VID           VID's variational regressor: (pred_mean, pred_var) for VIDLoss
//   VarianceBranch4PAD      PAD's variance estimator: log-variances for PADL2Loss
//   Linear4CRD              CRD's embedding: linear, then L_power-normalized, for CRDLoss
//   Linear4CCKD             CCKD's embedding: a linear on the flattened value, for CCKDLoss
//   ChannelSimilarityEmbed  ICKD's embedding: 3x3 conv + batch norm
//   Paraphraser4FactorTransfer, Translator4FactorTransfer  factor transfer's (Kim et al. 2018)
// torchdistill attaches them to the student through wrappers (VariationalDistributor4VID,
// VarianceBranch4PAD); here they are auxiliary modules of the stage's student, run on its
// recorded value, trained with it and kept in the run's checkpoints.
#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "absl/strings/str_cat.h"
#include "base/kwargs.h"
#include "distill/boxes/aux_modules.h"

namespace kd {
namespace {

namespace nn = torch::nn;

// torchdistill's Regressor4VID: three bias-free 1x1 convolutions (ReLU between) predicting the
// teacher's map's mean, and one variance per channel, softplus(soft_plus_param) + eps, the
// parameter starting where the variance is init_pred_var. Returns (pred_mean, pred_var of shape
// (1, C, 1, 1)); parameters "regressor.{0,2,4}.weight" and "soft_plus_param" as torchdistill's.
class Regressor4VidImpl : public nn::Module {
 public:
  Regressor4VidImpl(int64_t in, int64_t middle, int64_t out, double eps, double init_pred_var)
      : regressor_(register_module(
            "regressor",
            nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, middle, 1).bias(false)), nn::ReLU(),
                           nn::Conv2d(nn::Conv2dOptions(middle, middle, 1).bias(false)), nn::ReLU(),
                           nn::Conv2d(nn::Conv2dOptions(middle, out, 1).bias(false))))),
        soft_plus_param_(register_parameter(
            "soft_plus_param", at::full({out}, std::log(std::exp(init_pred_var - eps) - 1.0)))),
        eps_(eps) {}

  std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& feature_map) {
    const at::Tensor mean = regressor_->forward(feature_map);
    const at::Tensor var = at::log(1.0 + at::exp(soft_plus_param_)) + eps_;
    return {mean, var.view({1, -1, 1, 1})};
  }

 private:
  nn::Sequential regressor_;
  at::Tensor soft_plus_param_;
  double eps_;
};
TORCH_MODULE(Regressor4Vid);

// torchdistill's VarianceBranch4PAD's estimator: Linear(feat_dim, feat_dim) then BatchNorm1d on
// the flattened input ("var_estimator.0.*", "var_estimator.1.*", as in the wrapper's state
// dict).
class VarianceBranch4PadImpl : public nn::Module {
 public:
  explicit VarianceBranch4PadImpl(int64_t feat_dim)
      : estimator_(register_module("var_estimator", nn::Sequential(nn::Linear(feat_dim, feat_dim),
                                                                   nn::BatchNorm1d(feat_dim)))) {}
  at::Tensor forward(const at::Tensor& embeddings) {
    return estimator_->forward(embeddings.flatten(1));
  }

 private:
  nn::Sequential estimator_;
};
TORCH_MODULE(VarianceBranch4Pad);

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

// Factor transfer's blocks as torchdistill builds them: a convolution (transposed in the
// paraphraser's decoder), a batch norm if `uses_bn`, LeakyReLU(0.1).
struct FactorBlocks {
  int64_t kernel_size, stride, padding;
  bool uses_bn;
  void Append(nn::SequentialImpl& seq, int64_t in, int64_t out, bool transposed) const {
    if (transposed) {
      seq.push_back(nn::ConvTranspose2d(
          nn::ConvTranspose2dOptions(in, out, kernel_size).stride(stride).padding(padding)));
    } else {
      seq.push_back(
          nn::Conv2d(nn::Conv2dOptions(in, out, kernel_size).stride(stride).padding(padding)));
    }
    if (uses_bn) seq.push_back(nn::BatchNorm2d(out));
    seq.push_back(nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.1)));
  }
};

FactorBlocks FactorBlocksOf(const Kwargs& kwargs) {
  return {IntKwarg(kwargs, "kernel_size"), IntKwarg(kwargs, "stride"), IntKwarg(kwargs, "padding"),
          BoolKwarg(kwargs, "uses_bn")};
}

// torchdistill's Paraphraser4FactorTransfer: an encoder of three blocks (in -> in -> in*k ->
// in*k channels) and a decoder back (transposed convolutions); with `uses_decoder` it returns
// the reconstruction (its own training stage), without it the factor ("encoder.*",
// "decoder.*").
class ParaphraserImpl : public nn::Module {
 public:
  ParaphraserImpl(double k, int64_t in, const FactorBlocks& blocks, bool uses_decoder)
      : uses_decoder_(uses_decoder) {
    const int64_t factor = static_cast<int64_t>(static_cast<double>(in) * k);
    nn::Sequential encoder, decoder;
    blocks.Append(*encoder, in, in, false);
    blocks.Append(*encoder, in, factor, false);
    blocks.Append(*encoder, factor, factor, false);
    blocks.Append(*decoder, factor, factor, true);
    blocks.Append(*decoder, factor, in, true);
    blocks.Append(*decoder, in, in, true);
    encoder_ = register_module("encoder", encoder);
    decoder_ = register_module("decoder", decoder);
  }
  at::Tensor forward(const at::Tensor& z) {
    const at::Tensor factor = encoder_->forward(z);
    return uses_decoder_ ? decoder_->forward(factor) : factor;
  }

 private:
  bool uses_decoder_;
  nn::Sequential encoder_{nullptr}, decoder_{nullptr};
};
TORCH_MODULE(Paraphraser);

// torchdistill's Translator4FactorTransfer, an nn.Sequential subclass: three blocks (in -> in
// -> out -> out channels), "0.*", "1.*", ... as its state dict. (A plain Sequential has a
// templated forward, which AnyModule cannot hold.)
class TranslatorImpl : public nn::SequentialImpl {
 public:
  TranslatorImpl(int64_t in, int64_t out, const FactorBlocks& blocks) {
    blocks.Append(*this, in, in, false);
    blocks.Append(*this, in, out, false);
    blocks.Append(*this, out, out, false);
  }
  at::Tensor forward(const at::Tensor& x) { return nn::SequentialImpl::forward(x); }
};
TORCH_MODULE(Translator);

std::vector<KwargSpec> FactorBlockSpecs() {
  return {{.name = "kernel_size",
           .type = KwargType::kInteger,
           .doc = "the convolutions'",
           .default_value = int64_t{3},
           .min = 1},
          {.name = "stride",
           .type = KwargType::kInteger,
           .doc = "the convolutions'",
           .default_value = int64_t{1},
           .min = 1},
          {.name = "padding",
           .type = KwargType::kInteger,
           .doc = "the convolutions'",
           .default_value = int64_t{1},
           .min = 0},
          {.name = "uses_bn",
           .type = KwargType::kBool,
           .doc = "a batch norm after each convolution",
           .default_value = true}};
}

std::vector<KwargSpec> With(std::vector<KwargSpec> specs, std::vector<KwargSpec> more) {
  specs.insert(specs.end(), more.begin(), more.end());
  return specs;
}

KwargSpec Channels(const char* name, const char* doc) {
  return {.name = name, .type = KwargType::kInteger, .doc = doc, .min = 1, .required = true};
}

KD_REGISTER(AuxiliaryModuleRegistry(), "Regressor4VID",
            ([](const Kwargs& kwargs) -> absl::StatusOr<nn::AnyModule> {
              return nn::AnyModule(Regressor4Vid(
                  IntKwarg(kwargs, "in_channels"), IntKwarg(kwargs, "middle_channels"),
                  IntKwarg(kwargs, "out_channels"), NumberKwarg(kwargs, "eps"),
                  NumberKwarg(kwargs, "init_pred_var")));
            }),
            {Channels("in_channels", "the student map's channels"),
             Channels("middle_channels", "the hidden convolutions' channels"),
             Channels("out_channels", "the teacher map's channels"),
             {.name = "eps",
              .type = KwargType::kNumber,
              .doc = "the variances' floor",
              .min = 0,
              .min_exclusive = true,
              .required = true},
             {.name = "init_pred_var",
              .type = KwargType::kNumber,
              .doc = "the variances' start, > eps",
              .min = 0,
              .min_exclusive = true,
              .required = true}},
            [](const KwargsView& view) {
              const double eps = NumberKwarg(view.kwargs, "eps");
              const double init = NumberKwarg(view.kwargs, "init_pred_var");
              if (init <= eps) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "init_pred_var must exceed eps (softplus^-1 of their difference), got ", init,
                    " and ", eps));
              }
              return absl::OkStatus();
            });

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

KD_REGISTER(AuxiliaryModuleRegistry(), "Paraphraser4FactorTransfer",
            ([](const Kwargs& kwargs) -> absl::StatusOr<nn::AnyModule> {
              return nn::AnyModule(
                  Paraphraser(NumberKwarg(kwargs, "k"), IntKwarg(kwargs, "num_input_channels"),
                              FactorBlocksOf(kwargs), BoolKwarg(kwargs, "uses_decoder")));
            }),
            With(FactorBlockSpecs(),
                 {PositiveNumberSpec("k", "the paraphrase rate: factor channels / input's", 0.5),
                  Channels("num_input_channels", "the teacher map's channels"),
                  {.name = "uses_decoder",
                   .type = KwargType::kBool,
                   .doc = "return the reconstruction (its training stage), not the factor",
                   .default_value = true}}));
KD_REGISTER(AuxiliaryModuleRegistry(), "Translator4FactorTransfer",
            ([](const Kwargs& kwargs) -> absl::StatusOr<nn::AnyModule> {
              return nn::AnyModule(Translator(IntKwarg(kwargs, "num_input_channels"),
                                              IntKwarg(kwargs, "num_output_channels"),
                                              FactorBlocksOf(kwargs)));
            }),
            With(FactorBlockSpecs(), {Channels("num_input_channels", "the student map's channels"),
                                      Channels("num_output_channels", "the factor's channels")}));

KD_REGISTER(AuxiliaryModuleRegistry(), "VarianceBranch4PAD",
            ([](const Kwargs& kwargs) -> absl::StatusOr<nn::AnyModule> {
              return nn::AnyModule(VarianceBranch4Pad(IntKwarg(kwargs, "feat_dim")));
            }),
            {Channels("feat_dim", "the flattened embedding's size")});

}  // namespace
}  // namespace kd
