#include "distill/boxes/projector_fusion.h"

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <variant>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace kd {
namespace {

// A projector's weight as the [to, from] matrix of its channel map (a 1x1 convolution's
// squeezed).
at::Tensor Matrix(const at::Tensor& weight) {
  return weight.dim() == 4 ? weight.squeeze(-1).squeeze(-1) : weight;
}

// W_mod's columns mixed by `projector` (W_mod: [out, in] or [out, in, kh, kw]).
at::Tensor Through(const at::Tensor& w_mod, const at::Tensor& projector) {
  return w_mod.dim() == 4 ? at::einsum("ojhw,ji->oihw", {w_mod, projector}) : w_mod.mm(projector);
}

// What a bias entering the module's input adds to its output: the module's kernel summed over
// its taps (a Linear's weight as it is) times the bias.
at::Tensor BiasThrough(const at::Tensor& w_mod, const at::Tensor& bias) {
  return (w_mod.dim() == 4 ? w_mod.sum({-2, -1}) : w_mod).mv(bias);
}

// The fused weight and bias (undefined: none) of `w_mod`/`b_mod` with the projectors' (each
// undefined where absent), as silverspoon-kd's _fuse_linear_projectors and
// _fuse_conv2d_projectors compute them.
std::pair<at::Tensor, at::Tensor> Fuse(const at::Tensor& w_mod, const at::Tensor& b_mod,
                                       const at::Tensor& w_in, const at::Tensor& b_in,
                                       const at::Tensor& w_out, const at::Tensor& b_out) {
  at::Tensor w = w_mod, b = b_mod;
  if (w_in.defined()) {
    w = Through(w, Matrix(w_in));
    if (b_in.defined()) b = b.defined() ? BiasThrough(w_mod, b_in) + b : BiasThrough(w_mod, b_in);
  }
  if (w_out.defined()) {
    w = Through(w, Matrix(w_out));
    if (b_out.defined()) {
      const at::Tensor partial = w_in.defined() ? Through(w_mod, Matrix(w_in)) : w_mod;
      b = b.defined() ? BiasThrough(partial, b_out) + b : BiasThrough(partial, b_out);
    }
  }
  return {w, b.defined() ? b.clone() : b};
}

const char* KindName(const torch::nn::Module* module) {
  if (dynamic_cast<const torch::nn::LinearImpl*>(module) != nullptr) return "Linear";
  if (dynamic_cast<const torch::nn::Conv2dImpl*>(module) != nullptr) return "Conv2d";
  return nullptr;
}

std::string TypeName(const torch::nn::Module& module) {
  const char* kind = KindName(&module);
  return kind != nullptr ? std::string(kind) : module.name();
}

// The projector `role` as a `T` (LinearImpl or Conv2dImpl), or an error naming what it is.
template <typename T>
absl::StatusOr<T*> Projector(const std::shared_ptr<torch::nn::Module>& projector, const char* role,
                             const char* kind) {
  if (projector == nullptr) return nullptr;
  auto* as = dynamic_cast<T*>(projector.get());
  if (as == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        role, " is a ", TypeName(*projector), ": a ", kind, " module fuses ", kind,
        " projectors only (Generic", kind, "Projector); give a projector of that kind"));
  }
  return as;
}

// A projector convolution must be a plain channel map: 1x1, stride 1, no padding, ungrouped.
absl::Status CheckChannelMap(const torch::nn::Conv2dImpl* projector, const char* role) {
  if (projector == nullptr) return absl::OkStatus();
  const auto& o = projector->options;
  const auto* padding = std::get_if<torch::ExpandingArray<2>>(&o.padding());
  const bool unpadded = std::holds_alternative<torch::enumtype::kValid>(o.padding()) ||
                        (padding != nullptr && (*padding)->at(0) == 0 && (*padding)->at(1) == 0);
  if (o.kernel_size()->at(0) != 1 || o.kernel_size()->at(1) != 1 || o.stride()->at(0) != 1 ||
      o.stride()->at(1) != 1 || !unpadded || o.groups() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        role,
        " must be a 1x1 convolution with stride 1, no padding and one group to fuse "
        "(GenericConv2dProjector's form); got kernel ",
        o.kernel_size()->at(0), "x", o.kernel_size()->at(1), ", stride ", o.stride()->at(0), "x",
        o.stride()->at(1), unpadded ? "" : ", padding", ", groups ", o.groups()));
  }
  return absl::OkStatus();
}

// The widths must chain: output projector -> input projector -> module.
absl::Status CheckWidths(const at::Tensor& w_mod, const at::Tensor& w_in, const at::Tensor& w_out,
                         const char* unit) {
  int64_t needed = w_mod.size(1);
  const char* consumer = "the module";
  if (w_in.defined()) {
    if (w_in.size(0) != needed) {
      return absl::InvalidArgumentError(
          absl::StrCat("input_projector gives ", w_in.size(0), " ", unit, " but ", consumer,
                       " takes ", needed, ": its out width must be the module's in width"));
    }
    needed = w_in.size(1);
    consumer = "input_projector";
  }
  if (w_out.defined() && w_out.size(0) != needed) {
    return absl::InvalidArgumentError(
        absl::StrCat("output_projector gives ", w_out.size(0), " ", unit, " but ", consumer,
                     " takes ", needed, ": its out width must be the next one's in width"));
  }
  return absl::OkStatus();
}

// Gives `param` (a module's registered weight or bias) the value `value` in place: the
// parameter keeps its identity, as a registered tensor must.
void Assign(at::Tensor& param, const at::Tensor& value) {
  const bool requires_grad = param.requires_grad();
  param.set_data(value);
  param.set_requires_grad(requires_grad);
}

absl::Status CheckInplaceBias(const at::Tensor& module_bias, const at::Tensor& fused_bias) {
  if (!module_bias.defined() && fused_bias.defined()) {
    return absl::InvalidArgumentError(
        "inplace: the module has no bias and the fusion gives it one (a projector's bias), "
        "which libtorch cannot add to a module registered without it; fuse with inplace = false "
        "and put the returned module in the old one's place");
  }
  return absl::OkStatus();
}

// The fused weight and bias of `impl` (a LinearImpl or Conv2dImpl) with the projectors, each
// an `Impl` (the kind's name `kind`, its widths' unit `unit`); `check` adds the kind's own
// checks of the module and the projectors.
template <typename Impl>
absl::StatusOr<std::pair<at::Tensor, at::Tensor>> FusedParams(
    Impl& impl, const ProjectorsToFuse& projectors, const char* kind, const char* unit,
    const std::function<absl::Status(const Impl* in, const Impl* out)>& check) {
  absl::StatusOr<Impl*> in = Projector<Impl>(projectors.input_projector, "input_projector", kind);
  if (!in.ok()) return in.status();
  absl::StatusOr<Impl*> out =
      Projector<Impl>(projectors.output_projector, "output_projector", kind);
  if (!out.ok()) return out.status();
  if (absl::Status s = check(*in, *out); !s.ok()) return s;
  const at::Tensor none;
  const at::Tensor& w_in = *in ? (*in)->weight : none;
  const at::Tensor& w_out = *out ? (*out)->weight : none;
  if (absl::Status s = CheckWidths(impl.weight, w_in, w_out, unit); !s.ok()) return s;
  at::NoGradGuard no_grad;
  std::pair<at::Tensor, at::Tensor> fused = Fuse(
      impl.weight, impl.bias, w_in, *in ? (*in)->bias : none, w_out, *out ? (*out)->bias : none);
  if (projectors.inplace) {
    if (absl::Status s = CheckInplaceBias(impl.bias, fused.second); !s.ok()) return s;
    Assign(impl.weight, fused.first);
    if (fused.second.defined()) Assign(impl.bias, fused.second);
  }
  return fused;
}

// `fused` (a new module of the kind `Impl`) given the fused weight and bias, its parameters
// requiring grad as `module`'s did.
template <typename Impl>
std::shared_ptr<torch::nn::Module> WithParams(const Impl& module, std::shared_ptr<Impl> fused,
                                              const std::pair<at::Tensor, at::Tensor>& params) {
  at::NoGradGuard no_grad;
  fused->weight.set_data(params.first);
  fused->weight.set_requires_grad(module.weight.requires_grad());
  if (params.second.defined()) {
    fused->bias.set_data(params.second);
    fused->bias.set_requires_grad(module.bias.defined() ? module.bias.requires_grad()
                                                        : module.weight.requires_grad());
  }
  return fused;
}

absl::StatusOr<std::shared_ptr<torch::nn::Module>> FuseLinear(
    const std::shared_ptr<torch::nn::Module>& module, torch::nn::LinearImpl& linear,
    const ProjectorsToFuse& projectors) {
  absl::StatusOr<std::pair<at::Tensor, at::Tensor>> params = FusedParams<torch::nn::LinearImpl>(
      linear, projectors, "Linear", "features",
      [](const torch::nn::LinearImpl*, const torch::nn::LinearImpl*) { return absl::OkStatus(); });
  if (!params.ok()) return params.status();
  const int64_t in = params->first.size(1), out = params->first.size(0);
  if (projectors.inplace) {
    linear.options.in_features(in).out_features(out);
    return module;
  }
  return WithParams(linear,
                    std::make_shared<torch::nn::LinearImpl>(
                        torch::nn::LinearOptions(in, out).bias(params->second.defined())),
                    *params);
}

absl::StatusOr<std::shared_ptr<torch::nn::Module>> FuseConv2d(
    const std::shared_ptr<torch::nn::Module>& module, torch::nn::Conv2dImpl& conv,
    const ProjectorsToFuse& projectors) {
  absl::StatusOr<std::pair<at::Tensor, at::Tensor>> params = FusedParams<torch::nn::Conv2dImpl>(
      conv, projectors, "Conv2d", "channels",
      [&conv](const torch::nn::Conv2dImpl* in, const torch::nn::Conv2dImpl* out) {
        KD_RETURN_IF_ERROR(CheckChannelMap(in, "input_projector"));
        KD_RETURN_IF_ERROR(CheckChannelMap(out, "output_projector"));
        if (conv.options.groups() != 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "the module is a grouped convolution (groups ", conv.options.groups(),
              "): a projector mixes every channel, so it fuses into an ungrouped convolution "
              "only"));
        }
        return absl::OkStatus();
      });
  if (!params.ok()) return params.status();
  const int64_t in = params->first.size(1), out = params->first.size(0);
  if (projectors.inplace) {
    conv.options.in_channels(in).out_channels(out);
    return module;
  }
  const auto& o = conv.options;
  return WithParams(
      conv,
      std::make_shared<torch::nn::Conv2dImpl>(torch::nn::Conv2dOptions(in, out, o.kernel_size())
                                                  .stride(o.stride())
                                                  .padding(o.padding())
                                                  .dilation(o.dilation())
                                                  .bias(params->second.defined())
                                                  .padding_mode(o.padding_mode())),
      *params);
}

}  // namespace

absl::StatusOr<std::shared_ptr<torch::nn::Module>> FuseProjectorsIntoModule(
    const std::shared_ptr<torch::nn::Module>& module, const ProjectorsToFuse& projectors) {
  if (module == nullptr) return absl::InvalidArgumentError("no module to fuse projectors into");
  auto* linear = dynamic_cast<torch::nn::LinearImpl*>(module.get());
  auto* conv = dynamic_cast<torch::nn::Conv2dImpl*>(module.get());
  if (linear == nullptr && conv == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "projectors fuse into a Linear or Conv2d module only (silverspoon-kd's rule); the "
        "module is a ",
        module->name(), ": fuse them into the Linear or Conv2d that reads the projected value"));
  }
  if (projectors.input_projector == nullptr && projectors.output_projector == nullptr) {
    return module;  // nothing to fuse, as silverspoon-kd returns it
  }
  return linear != nullptr ? FuseLinear(module, *linear, projectors)
                           : FuseConv2d(module, *conv, projectors);
}

}  // namespace kd
