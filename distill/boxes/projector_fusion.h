// silverspoon-kd's fuse_projectors_into_module: after feature distillation, the projectors an
// alignment trained beside the student are folded into the student's next layer, so the
// deployed student runs without them and computes the same.
//
// The flow is prev_layer -> output_projector -> input_projector -> module, each optional but
// not both absent; the fused module takes what the output projector (else the input
// projector) took and returns what the module returned:
//   Linear:  W = W_mod W_in W_out,  b = W_mod W_in b_out + W_mod b_in + b_mod
//   Conv2d:  W[o,i,h,w] = sum_jk W_mod[o,j,h,w] W_in[j,k] W_out[k,i]; each projector bias
//            passes through the kernel's sum over its taps
// with the projectors nn.Linear (GenericLinearProjector) for a Linear module and 1x1, stride 1,
// unpadded nn.Conv2d (GenericConv2dProjector) for a Conv2d one; the fused Conv2d keeps the
// module's kernel, stride, padding, dilation and padding mode. As silverspoon-kd documents, a
// projector bias fused into a zero-padded convolution is exact on interior pixels only (the
// padded zeros it never reached before now carry it); elsewhere the fused module equals the
// chain to rounding.
//
//   KD_ASSIGN_OR_RETURN(std::shared_ptr<torch::nn::Module> fused,
//                       kd::FuseProjectorsIntoModule(fc.ptr(), {.input_projector = proj.ptr()}));
//
// Refused, naming the fix (InvalidArgument): a module other than Linear or Conv2d, projectors
// of the other kind, a projector that is not 1x1 / stride 1 / unpadded (or grouped), a grouped
// module with projectors, widths that do not chain (silverspoon-kd leaves these to torch's
// matmul error), and, in place, a fusion that gives a module registered without a bias one
// (libtorch cannot re-register a parameter: fuse into a new module and put it in the old one's
// place).
#ifndef LIBKD_DISTILL_BOXES_PROJECTOR_FUSION_H_
#define LIBKD_DISTILL_BOXES_PROJECTOR_FUSION_H_

#include <memory>

#include "absl/status/statusor.h"

namespace torch {
namespace nn {
class Module;
}  // namespace nn
}  // namespace torch

namespace kd {

struct ProjectorsToFuse {
  // The projector applied right before the module (mode "input"); null: none.
  std::shared_ptr<torch::nn::Module> input_projector;
  // The projector of the preceding layer's output, applied first (mode "output"); null: none.
  std::shared_ptr<torch::nn::Module> output_projector;
  // Modify `module` itself (its weight and bias take the fused values, its options the fused
  // widths; the parameters keep their identity) instead of returning a new module.
  bool inplace = false;
};

// The module with the projectors folded into it: a new torch::nn::Linear / Conv2d (the same
// options, the fused widths and parameters), or `module` itself with `inplace` or when there
// is no projector to fuse (as silverspoon-kd returns it). The parameters are the fused values,
// without autograd history, requiring grad as the module's did.
absl::StatusOr<std::shared_ptr<torch::nn::Module>> FuseProjectorsIntoModule(
    const std::shared_ptr<torch::nn::Module>& module, const ProjectorsToFuse& projectors);

}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_PROJECTOR_FUSION_H_
