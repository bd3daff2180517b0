// Factor transfer's modules (Kim et al. 2018), as torchdistill builds them
// (torchdistill/models/wrapper.py: Paraphraser4FactorTransfer, Translator4FactorTransfer), under
// its class names, kwargs and state-dict names: the teacher's paraphraser, trained in a stage of
// its own and carried to the next by its checkpoint file, and the student's translator.
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>
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
using boxes_internal::ConvGeometrySpecs;
using boxes_internal::With;

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
  return With(ConvGeometrySpecs(3, 1, "the convolutions'"),
              {{.name = "uses_bn",
                .type = KwargType::kBool,
                .doc = "a batch norm after each convolution",
                .default_value = true}});
}

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

// torchdistill's factor-transfer wrappers (//tools:import_torchdistill): the teacher's
// paraphraser (its kwargs, its checkpoint file, the stage's trimmed teacher) and the student's
// translator, each on the value input_module_path names.
KD_REGISTER(TorchdistillAuxRules(), "Teacher4FactorTransfer",
            TorchdistillAuxRule{.model_prefix = "teacher_model.",
                                .name = "paraphraser",
                                .input_kwarg = "input_module_path",
                                .flattened = {"paraphraser_kwargs"},
                                .ckpt_kwarg = "paraphraser_ckpt",
                                .single_module_key = "Paraphraser4FactorTransfer",
                                .minimal_kwarg = "minimal"},
            kAnyKwargs);
KD_REGISTER(TorchdistillAuxRules(), "Student4FactorTransfer",
            TorchdistillAuxRule{.model_prefix = "student_model.",
                                .name = "translator",
                                .input_kwarg = "input_module_path",
                                .flattened = {"translator_kwargs"},
                                .single_module_key = "Translator4FactorTransfer"},
            kAnyKwargs);

}  // namespace
}  // namespace kd
