// Auxiliary modules of torchdistill's methods (its torchdistill/models/wrapper.py), under its
// class names, with its kwargs and the state-dict names its files hold, so that its trained
// modules load:
//   Regressor4VID           VID's variational regressor: (pred_mean, pred_var) for VIDLoss
//   VarianceBranch4PAD      PAD's variance estimator: log-variances for PADL2Loss
//   Linear4CRD              CRD's embedding: linear, then L_power-normalized, for CRDLoss
//   Linear4CCKD             CCKD's embedding: a linear on the flattened value, for CCKDLoss
//   ChannelSimilarityEmbed  ICKD's embedding: 3x3 conv + batch norm
//   Paraphraser4FactorTransfer, Translator4FactorTransfer  factor transfer's (Kim et al. 2018)
//   SSWrapper4SSKD          SSKD's self-supervision module, for AuxSSKDLoss and SSKDLoss
//   Connector4DAB           DAB's connector: conv (+ batch norm)
//   FeatureAdapter4KTAAD, AffinityAdapter4KTAAD  KTAAD's adapters, for KTALoss and AffinityLoss
//   SRDModelWrapper         SRD's projector: spatial mean, linear, batch norm
//   AttentionBasedFusion    knowledge review's fusion, chained deepest first
// torchdistill attaches them to a model through wrappers (VariationalDistributor4VID,
// Student4KnowledgeReview, ...); here they are auxiliary modules of the stage's model, run on
// its recorded values (and on earlier modules' outputs), trained with it and kept in the run's
// checkpoints.
#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/init.h>
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

// A Sequential whose forward takes one tensor (a plain Sequential's forward is templated, which
// AnyModule cannot hold), flattened first if `flattens`: its state dict is "0.*", "1.*", ... as
// torchdistill saves its method's module alone (var_estimator_ckpt, ss_module_ckpt).
class StackImpl : public nn::SequentialImpl {
 public:
  explicit StackImpl(bool flattens) : flattens_(flattens) {}
  at::Tensor forward(const at::Tensor& x) {
    return nn::SequentialImpl::forward(flattens_ ? x.flatten(1) : x);
  }

 private:
  bool flattens_;
};
TORCH_MODULE(Stack);

// torchdistill's VarianceBranch4PAD's estimator: Linear(feat_dim, feat_dim) then BatchNorm1d on
// the flattened input; "0.*", "1.*" as its var_estimator_ckpt holds them.
Stack VarianceBranch4Pad(int64_t feat_dim) {
  Stack stack(/*flattens=*/true);
  stack->push_back(nn::Linear(feat_dim, feat_dim));
  stack->push_back(nn::BatchNorm1d(feat_dim));
  return stack;
}

// SSKD's self-supervision module (torchdistill's SSWrapper4SSKD.ss_module): Linear, ReLU, Linear
// (feat_dim wide) on the flattened value; "0.*", "2.*" as its ss_module_ckpt holds them.
Stack SelfSupervision4Sskd(int64_t feat_dim) {
  Stack stack(/*flattens=*/true);
  stack->push_back(nn::Linear(feat_dim, feat_dim));
  stack->push_back(nn::ReLU());
  stack->push_back(nn::Linear(feat_dim, feat_dim));
  return stack;
}

// A convolution from the kwargs in_channels, out_channels, kernel_size, stride, padding, bias
// (torch.nn.Conv2d's, as torchdistill's conv2d_kwargs / conv_kwargs give them).
nn::Conv2d ConvOf(const Kwargs& kwargs) {
  return nn::Conv2d(nn::Conv2dOptions(IntKwarg(kwargs, "in_channels"),
                                      IntKwarg(kwargs, "out_channels"),
                                      IntKwarg(kwargs, "kernel_size"))
                        .stride(IntKwarg(kwargs, "stride"))
                        .padding(IntKwarg(kwargs, "padding"))
                        .bias(BoolKwarg(kwargs, "bias")));
}

// torchdistill's Connector4DAB connector: the convolution, then a batch norm if `uses_bn` (its
// bn2d_kwargs given).
Stack Connector4Dab(const Kwargs& kwargs) {
  Stack stack(/*flattens=*/false);
  stack->push_back(ConvOf(kwargs));
  if (BoolKwarg(kwargs, "uses_bn"))
    stack->push_back(nn::BatchNorm2d(IntKwarg(kwargs, "out_channels")));
  return stack;
}

// torchdistill's Student4KTAAD adapters: the feature adapter (convolution, batch norm, ReLU) whose
// output KTALoss reads, and the affinity adapter (a convolution) whose output AffinityLoss reads.
Stack FeatureAdapter4Ktaad(const Kwargs& kwargs) {
  Stack stack(/*flattens=*/false);
  stack->push_back(ConvOf(kwargs));
  stack->push_back(nn::BatchNorm2d(IntKwarg(kwargs, "out_channels")));
  stack->push_back(nn::ReLU());
  return stack;
}
Stack AffinityAdapter4Ktaad(const Kwargs& kwargs) {
  Stack stack(/*flattens=*/false);
  stack->push_back(ConvOf(kwargs));
  return stack;
}

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

// Knowledge review's attention-based fusion (Chen et al. 2021; torchdistill's
// AttentionBasedFusion): x through a 1x1 convolution and batch norm to mid channels; with
// attention, fused with the previous (deeper) fusion's residual y, resized (nearest) to x's
// size, by two attention maps a 1x1 convolution and a sigmoid draw from both; then a 3x3
// convolution and batch norm to out channels. Returns (output, residual): the loss reads the
// first, the next fusion the second. torchdistill resizes y to (size, size) given per fusion
// (its wrapper's `sizes`); that must be x's size, which is the default here.
class AttentionBasedFusionImpl : public nn::Module {
 public:
  AttentionBasedFusionImpl(int64_t in, int64_t mid, int64_t out, bool uses_attention, int64_t size)
      : conv1_(register_module("conv1",
                               nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, mid, 1).bias(false)),
                                              nn::BatchNorm2d(mid)))),
        conv2_(register_module(
            "conv2",
            nn::Sequential(nn::Conv2d(nn::Conv2dOptions(mid, out, 3).padding(1).bias(false)),
                           nn::BatchNorm2d(out)))),
        size_(size) {
    if (uses_attention) {
      attention_conv_ = register_module(
          "attention_conv",
          nn::Sequential(nn::Conv2d(nn::Conv2dOptions(2 * mid, 2, 1)), nn::Sigmoid()));
    }
    nn::init::kaiming_uniform_(conv1_[0]->as<nn::Conv2d>()->weight, /*a=*/1);
    nn::init::kaiming_uniform_(conv2_[0]->as<nn::Conv2d>()->weight, /*a=*/1);
  }

  std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& input, const at::Tensor& residual) {
    at::Tensor x = conv1_->forward(input);
    if (attention_conv_) {
      TORCH_CHECK(residual.defined(),
                  "a fusion with attention (uses_attention: true) reads the previous fusion's "
                  "residual: add extra_inputs { path: \"<its name>\" element: 1 }");
      const int64_t n = x.size(0), h = x.size(2), w = x.size(3);
      const at::Tensor y = at::upsample_nearest2d(
          residual, size_ > 0 ? std::vector<int64_t>{size_, size_} : std::vector<int64_t>{h, w});
      const at::Tensor z = attention_conv_->forward(at::cat({x, y}, 1));
      x = x * z.select(1, 0).view({n, 1, h, w}) + y * z.select(1, 1).view({n, 1, h, w});
    } else {
      TORCH_CHECK(!residual.defined(),
                  "a fusion without attention (the deepest, uses_attention: false) takes one "
                  "input; set uses_attention: true to fuse a residual");
    }
    return {conv2_->forward(x), x};
  }

 protected:
  FORWARD_HAS_DEFAULT_ARGS({1, nn::AnyValue(at::Tensor())})

 private:
  nn::Sequential conv1_, conv2_;
  nn::Sequential attention_conv_{nullptr};
  int64_t size_;
};
TORCH_MODULE(AttentionBasedFusion);

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
KD_REGISTER(AuxiliaryModuleRegistry(), "SSWrapper4SSKD",
            ([](const Kwargs& kwargs) -> absl::StatusOr<nn::AnyModule> {
              return nn::AnyModule(SelfSupervision4Sskd(IntKwarg(kwargs, "feat_dim")));
            }),
            {Channels("feat_dim", "the flattened value's size")});

std::vector<KwargSpec> ConvSpecs(int64_t kernel_size, int64_t padding) {
  return {Channels("in_channels", "the map's channels"),
          Channels("out_channels", "the output's channels"),
          {.name = "kernel_size",
           .type = KwargType::kInteger,
           .doc = "the convolution's",
           .default_value = kernel_size,
           .min = 1},
          {.name = "stride",
           .type = KwargType::kInteger,
           .doc = "the convolution's",
           .default_value = int64_t{1},
           .min = 1},
          {.name = "padding",
           .type = KwargType::kInteger,
           .doc = "the convolution's",
           .default_value = padding,
           .min = 0},
          {.name = "bias",
           .type = KwargType::kBool,
           .doc = "the convolution's bias",
           .default_value = true}};
}

KD_REGISTER(AuxiliaryModuleRegistry(), "Connector4DAB",
            ([](const Kwargs& kwargs) -> absl::StatusOr<nn::AnyModule> {
              return nn::AnyModule(Connector4Dab(kwargs));
            }),
            With(ConvSpecs(1, 0), {{.name = "uses_bn",
                                    .type = KwargType::kBool,
                                    .doc = "a batch norm after the convolution (bn2d_kwargs)",
                                    .default_value = false}}));
KD_REGISTER(AuxiliaryModuleRegistry(), "FeatureAdapter4KTAAD",
            ([](const Kwargs& kwargs) -> absl::StatusOr<nn::AnyModule> {
              return nn::AnyModule(FeatureAdapter4Ktaad(kwargs));
            }),
            ConvSpecs(1, 0));
KD_REGISTER(AuxiliaryModuleRegistry(), "AffinityAdapter4KTAAD",
            ([](const Kwargs& kwargs) -> absl::StatusOr<nn::AnyModule> {
              return nn::AnyModule(AffinityAdapter4Ktaad(kwargs));
            }),
            ConvSpecs(1, 0));
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
KD_REGISTER(AuxiliaryModuleRegistry(), "AttentionBasedFusion",
            ([](const Kwargs& kwargs) -> absl::StatusOr<nn::AnyModule> {
              return nn::AnyModule(AttentionBasedFusion(
                  IntKwarg(kwargs, "in_channels"), IntKwarg(kwargs, "mid_channels"),
                  IntKwarg(kwargs, "out_channels"), BoolKwarg(kwargs, "uses_attention"),
                  IntKwarg(kwargs, "size")));
            }),
            {Channels("in_channels", "the student map's channels"),
             Channels("mid_channels", "the fused maps' channels (the same for every fusion)"),
             Channels("out_channels", "the teacher map's channels"),
             {.name = "uses_attention",
              .type = KwargType::kBool,
              .doc = "fuse the previous fusion's residual (every fusion but the deepest)",
              .default_value = false},
             {.name = "size",
              .type = KwargType::kInteger,
              .doc = "the residual's size after resizing (torchdistill's sizes); 0: the map's",
              .default_value = int64_t{0},
              .min = 0}});

}  // namespace
}  // namespace kd
