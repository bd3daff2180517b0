// Knowledge review's attention-based fusion (torchdistill/models/wrapper.py's
// AttentionBasedFusion, which its Student4KnowledgeReview chains): an auxiliary module under its
// class name, kwargs and state-dict names. A config lists one fusion per student map, deepest
// first, each after the first reading the previous one's residual (extra_inputs, element 1).
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

#include "base/kwargs.h"
#include "distill/boxes/aux_modules.h"
#include "distill/boxes/internal/method_module_specs.h"
#include "distill/boxes/torchdistill_aux_rule.h"

namespace kd {
namespace {

namespace nn = torch::nn;
using boxes_internal::Channels;

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

// torchdistill's Student4KnowledgeReview: its fusions, deepest first, chained by their
// residuals (abf_modules.0 is the last abfs entry's).
KD_REGISTER(TorchdistillAuxRules(), "Student4KnowledgeReview",
            TorchdistillAuxRule{.model_prefix = "student_model.",
                                .module_key = "AttentionBasedFusion",
                                .module_path_prefix = "abf_modules.",
                                .chain_kwarg = "abfs",
                                .chain_sizes_kwarg = "sizes",
                                .chain_default_sizes = {1, 7, 14, 28, 56},
                                .chain_name = "abf",
                                .chain_switch = "uses_attention",
                                .module_renamed = {{"in_channel", "in_channels"},
                                                   {"mid_channel", "mid_channels"},
                                                   {"out_channel", "out_channels"}}},
            kAnyKwargs);
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
