// Auxiliary modules of torchdistill's methods (its torchdistill/models/wrapper.py), under its
// class names, with its kwargs and the state-dict names its files hold, so that its trained
// modules load:
//   Regressor4VID           VID's variational regressor: (pred_mean, pred_var) for VIDLoss
//   VarianceBranch4PAD      PAD's variance estimator: log-variances for PADL2Loss
//   SSWrapper4SSKD          SSKD's self-supervision module, for AuxSSKDLoss and SSKDLoss
//   Connector4DAB           DAB's connector: conv (+ batch norm)
//   FeatureAdapter4KTAAD, AffinityAdapter4KTAAD  KTAAD's adapters, for KTALoss and AffinityLoss
// The embeddings and projectors losses compare (Linear4CRD, Linear4CCKD, ChannelSimilarityEmbed,
// SRDModelWrapper) are in embedding_modules.cc, factor transfer's modules in
// factor_transfer_modules.cc, knowledge review's fusion in knowledge_review_modules.cc.
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
#include "distill/boxes/internal/method_module_specs.h"
#include "distill/boxes/torchdistill_aux_rule.h"

namespace kd {
namespace {

namespace nn = torch::nn;
using boxes_internal::Channels;
using boxes_internal::ConvGeometrySpecs;
using boxes_internal::With;

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

// torchdistill's VarianceBranch4PAD: its "var_estimator" on the student's embedding, with the
// checkpoint file it keeps between PAD's stages.
KD_REGISTER(TorchdistillAuxRules(), "VarianceBranch4PAD",
            TorchdistillAuxRule{.model_prefix = "student_model.",
                                .name = "var_estimator",
                                .input_kwarg = "input_module",
                                .ckpt_kwarg = "var_estimator_ckpt"},
            kAnyKwargs);
// torchdistill's Connector4DAB: a connector per connectors entry (its conv2d_kwargs flat, its
// bn2d_kwargs as uses_bn).
KD_REGISTER(TorchdistillAuxRules(), "Connector4DAB",
            TorchdistillAuxRule{.model_prefix = "student_model.",
                                .modules_kwarg = "connectors",
                                .module_key = "Connector4DAB",
                                .module_path_prefix = "connector_dict.",
                                .module_flattened = {"conv2d_kwargs"},
                                .module_switches = {{"bn2d_kwargs", "uses_bn"}}},
            kAnyKwargs);
// torchdistill's VariationalDistributor4VID: a Regressor4VID per regressors entry, on the
// student's value the entry names (its kwargs under "kwargs", or "regressor_kwargs" as
// torchdistill's sample configs write them).
KD_REGISTER(TorchdistillAuxRules(), "VariationalDistributor4VID",
            TorchdistillAuxRule{.model_prefix = "student_model.",
                                .modules_kwarg = "regressors",
                                .module_key = "Regressor4VID",
                                .module_path_prefix = "regressor_dict.",
                                .module_kwargs_names = {"kwargs", "regressor_kwargs"}},
            kAnyKwargs);
KD_REGISTER(AuxiliaryModuleRegistry(), "VarianceBranch4PAD",
            ([](const Kwargs& kwargs) -> absl::StatusOr<nn::AnyModule> {
              return nn::AnyModule(VarianceBranch4Pad(IntKwarg(kwargs, "feat_dim")));
            }),
            {Channels("feat_dim", "the flattened embedding's size")});
// torchdistill's SSWrapper4SSKD (a teacher's or a student's): its "ss_module" on the flattened
// value input_module names, with its checkpoint file; its freezes_ss_module only keeps the
// module out of DistributedDataParallel (the stage's requires_grad freezes it).
KD_REGISTER(TorchdistillAuxRules(), "SSWrapper4SSKD",
            TorchdistillAuxRule{.name = "ss_module",
                                .input_kwarg = "input_module",
                                .ckpt_kwarg = "ss_module_ckpt",
                                .dropped = {{"freezes_ss_module",
                                             "torchdistill's only keeps the module out of "
                                             "DistributedDataParallel; the stage's requires_grad "
                                             "freezes it"}}},
            kAnyKwargs);
KD_REGISTER(AuxiliaryModuleRegistry(), "SSWrapper4SSKD",
            ([](const Kwargs& kwargs) -> absl::StatusOr<nn::AnyModule> {
              return nn::AnyModule(SelfSupervision4Sskd(IntKwarg(kwargs, "feat_dim")));
            }),
            {Channels("feat_dim", "the flattened value's size")});

std::vector<KwargSpec> ConvSpecs(int64_t kernel_size, int64_t padding) {
  return With(With({Channels("in_channels", "the map's channels"),
                    Channels("out_channels", "the output's channels")},
                   ConvGeometrySpecs(kernel_size, padding, "the convolution's")),
              {{.name = "bias",
                .type = KwargType::kBool,
                .doc = "the convolution's bias",
                .default_value = true}});
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
}  // namespace
}  // namespace kd
