// Contrastive representation distillation (Tian et al., ICLR 2020) with
// torchdistill's definition (CRDLoss, refactored from the authors'
// RepDistiller): NCE against a memory bank of every training sample's
// embeddings, one bank per side.
//
// Inputs: "student" and "teacher" embeddings (B, input_size), already
// L2-normalized (the output of torchdistill's Normalizer4CRD, or any projection
// + normalization in the models), "pos_idx" (B) the samples' dataset indices,
// and optionally "contrast_idx" (B, K + 1) the indices to contrast with (column
// 0 the positives). Without contrast_idx, negatives are drawn uniformly from
// the bank, which is what torchdistill's alias sampler draws with its uniform
// unigrams (its own draw() reads a missing attribute and fails, so it only runs
// with contrast_idx given).
//
// State (NamedState, for checkpoints): memory_v1 and memory_v2 (output_size,
// input_size), and params [K, T, Z_v1, Z_v2, momentum] with the normalization
// constants Z set on the first call, as torchdistill keeps them. Each call
// updates the banks' rows of the batch by momentum.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "absl/strings/str_cat.h"
#include "base/ivalue_util.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "distill/losses/loss.h"
#include "distill/losses/torchdistill_rule.h"

namespace kd {
namespace {

struct CrdOptions {
  int64_t input_size = 0;   // embedding dimension
  int64_t output_size = 0;  // memory rows: the data set's size
  int64_t num_negative_samples = 0;
  int64_t num_samples = 0;  // for the noise distribution 1 / num_samples
  double temperature = 0.07;
  double momentum = 0.5;
  double eps = 1e-7;
};

class CrdLoss final : public Loss {
 public:
  explicit CrdLoss(const CrdOptions& o) : o_(o) {
    const double stdv = 1.0 / std::sqrt(static_cast<double>(o.input_size) / 3);
    memory_v1_ = at::rand({o.output_size, o.input_size}).mul_(2 * stdv).add_(-stdv);
    memory_v2_ = at::rand({o.output_size, o.input_size}).mul_(2 * stdv).add_(-stdv);
    params_ = at::tensor(
        {static_cast<double>(o.num_negative_samples), o.temperature, -1.0, -1.0, o.momentum},
        at::kFloat);
  }

  absl::StatusOr<at::Tensor> Forward(const LossInputs& inputs) override {
    KD_ASSIGN_OR_RETURN(at::Tensor student, inputs.Get("CRDLoss", "student"));
    KD_ASSIGN_OR_RETURN(at::Tensor teacher, inputs.Get("CRDLoss", "teacher"));
    KD_ASSIGN_OR_RETURN(at::Tensor pos, inputs.Get("CRDLoss", "pos_idx"));
    at::Tensor contrast = inputs.GetOptional("contrast_idx");
    const int64_t b = student.dim() == 2 ? student.size(0) : -1, k = o_.num_negative_samples;
    const bool fits = student.dim() == 2 && student.size(1) == o_.input_size &&
                      teacher.sizes().equals(student.sizes()) && pos.dim() == 1 &&
                      pos.size(0) == b && !at::isFloatingType(pos.scalar_type()) &&
                      (!contrast.defined() ||
                       (contrast.dim() == 2 && contrast.size(0) == b && contrast.size(1) == k + 1));
    if (!fits) {
      return absl::InvalidArgumentError(absl::StrCat(
          "loss \"CRDLoss\": needs student and teacher embeddings (B, ", o_.input_size,
          "), pos_idx (B) integer and optionally contrast_idx (B, ", k + 1, "); got student ",
          ShapeString(student), ", teacher ", ShapeString(teacher), ", pos_idx ", ShapeString(pos),
          contrast.defined() ? ", contrast_idx " + ShapeString(contrast) : ""));
    }
    return CallTorch([&] { return Compute(student, teacher, pos, contrast); },
                     absl::StatusCode::kInvalidArgument);
  }

  std::vector<std::pair<std::string, at::Tensor>> NamedState() const override {
    return {{"memory_v1", memory_v1_}, {"memory_v2", memory_v2_}, {"params", params_}};
  }

 private:
  at::Tensor Compute(const at::Tensor& student, const at::Tensor& teacher, at::Tensor pos,
                     at::Tensor contrast) {
    const c10::Device device = student.device();
    // The banks and constants follow the embeddings' device and floating-point type, as a
    // torch module's buffers follow the module (a float64 model computes CRD in float64).
    const at::ScalarType dtype = student.scalar_type();
    if (memory_v1_.device() != device || memory_v1_.scalar_type() != dtype) {
      at::NoGradGuard no_grad;
      memory_v1_ = memory_v1_.to(device, dtype);
      memory_v2_ = memory_v2_.to(device, dtype);
      params_ = params_.to(dtype);
    }
    const int64_t b = student.size(0), k = o_.num_negative_samples, d = o_.input_size;
    pos = pos.to(device, at::kLong);
    if (contrast.defined()) {
      contrast = contrast.to(device, at::kLong);
    } else {
      contrast = at::randint(0, o_.output_size, {b, k + 1}, pos.options());
      contrast.select(1, 0).copy_(pos);
    }
    const double t = params_[1].item<double>();
    auto scores = [&](const at::Tensor& memory, const at::Tensor& embed) {
      const at::Tensor weights =
          memory.index_select(0, contrast.view(-1)).detach().view({b, k + 1, d});
      return at::exp(at::bmm(weights, embed.view({b, d, 1})) / t);
    };
    at::Tensor out_v2 = scores(memory_v1_, teacher);
    at::Tensor out_v1 = scores(memory_v2_, student);
    // The normalization constants, set once from the first batch (kept in the
    // embeddings' type, float32 as torchdistill keeps them, so the numbers match).
    auto z = [&](int64_t slot, const at::Tensor& out) {
      if (params_[slot].item<double>() < 0) {
        params_[slot] = out.detach().mean().cpu() * static_cast<double>(o_.output_size);
      }
      return params_[slot].item<double>();
    };
    out_v1 = out_v1 / z(2, out_v1);
    out_v2 = out_v2 / z(3, out_v2);
    {
      at::NoGradGuard no_grad;
      const double m = params_[4].item<double>();
      auto update = [&](at::Tensor& memory, const at::Tensor& embed) {
        at::Tensor rows = memory.index_select(0, pos).mul_(m).add_(embed.detach() * (1 - m));
        memory.index_copy_(0, pos, rows.div(rows.pow(2).sum(1, /*keepdim=*/true).pow(0.5)));
      };
      update(memory_v1_, student);
      update(memory_v2_, teacher);
    }
    return (ContrastLoss(out_v1) + ContrastLoss(out_v2)).squeeze();
  }

  // NCE: -(log P(positive is data) + sum log P(negative is noise)) / batch.
  at::Tensor ContrastLoss(const at::Tensor& x) const {
    const int64_t m = x.size(1) - 1;
    const double noise = static_cast<double>(m) / static_cast<double>(o_.num_samples);
    const at::Tensor p_pos = x.select(1, 0);
    const at::Tensor log_d1 = (p_pos / (p_pos + (noise + o_.eps))).log();
    const at::Tensor p_neg = x.narrow(1, 1, m);
    const at::Tensor log_d0 = (noise / (p_neg + (noise + o_.eps))).log();
    return -(log_d1.sum(0) + log_d0.view({-1, 1}).sum(0)) / x.size(0);
  }

  CrdOptions o_;
  at::Tensor memory_v1_, memory_v2_, params_;
};

absl::StatusOr<std::unique_ptr<Loss>> MakeCrd(const Kwargs& kwargs) {
  CrdOptions o;
  o.input_size = IntKwarg(kwargs, "input_size");
  o.output_size = IntKwarg(kwargs, "output_size");
  o.num_negative_samples = IntKwarg(kwargs, "num_negative_samples");
  o.num_samples = IntKwarg(kwargs, "num_samples");
  o.temperature = NumberKwarg(kwargs, "temperature");
  o.momentum = NumberKwarg(kwargs, "momentum");
  o.eps = NumberKwarg(kwargs, "eps");
  return std::unique_ptr<Loss>(std::make_unique<CrdLoss>(o));
}

KD_REGISTER(LossRegistry(), "CRDLoss", MakeCrd,
            {{.name = "input_size",
              .type = KwargType::kInteger,
              .doc = "embedding dimension",
              .min = 1,
              .required = true},
             {.name = "output_size",
              .type = KwargType::kInteger,
              .doc = "memory rows: the training set's size",
              .min = 1,
              .required = true},
             {.name = "num_negative_samples",
              .type = KwargType::kInteger,
              .doc = "negatives per sample (RepDistiller: 16384)",
              .min = 1,
              .required = true},
             {.name = "num_samples",
              .type = KwargType::kInteger,
              .doc = "the training set's size, for the noise distribution",
              .min = 1,
              .required = true},
             PositiveNumberSpec("temperature", "softening T", 0.07),
             {.name = "momentum",
              .type = KwargType::kNumber,
              .doc = "memory update",
              .default_value = 0.5,
              .min = 0,
              .max = 1},
             NonNegativeNumberSpec("eps", "NCE's guard", 1e-7)});

}  // namespace
// torchdistill's rule (//tools:import_torchdistill): the two normalizers' outputs, and the
// batch's indices, which torchdistill reads as the input of the student wrapper's empty module.
KD_REGISTER(TorchdistillLossRules(), "CRDLoss",
            TorchdistillLossRule{
                .values = {{.arg = "student", .path_kwarg = "student_norm_module_path"},
                           {.arg = "teacher",
                            .from_teacher = true,
                            .path_kwarg = "teacher_norm_module_path"}},
                .batch_inputs = {{"pos_idx", "pos_idx"}, {"contrast_idx", "contrast_idx"}},
                .dropped = {{"student_empty_module_path",
                             "the batch's pos_idx and contrast_idx, which libkd's term reads from "
                             "the batch (source BATCH)"}}},
            kAnyKwargs);

}  // namespace kd
