// Self-supervision knowledge distillation (Xu et al. 2020, "Knowledge Distillation Meets
// Self-Supervision"), torchdistill's AuxSSKDLoss and SSKDLoss (torchdistill/losses/mid_level.py,
// 1.1.5), with its definitions, kwargs and defaults. Both read a batch of 4N rows made of N
// samples in four rotations each, sample-major (row 4i the sample, 4i+1..4i+3 its rotations by
// 90, 180 and 270 degrees): SSKDDatasetWrapper's samples run through forward_batch4sskd.
//
//   AuxSSKDLoss (stage 1, the teacher's self-supervision module trains): cross-entropy of the
//     cosine similarities between every rotated row's ss-module output and every unrotated
//     row's, the target being the row's own sample.
//   SSKDLoss (stage 2): CE(student on the unrotated rows, targets) + KL(teacher || student) at
//     kl_temp on them + KL of the students' similarity rows against the teacher's at ss_temp
//     + KL on the rotated rows at tf_temp, the last two on the rows the teacher ranks well
//     (ss_ratio, tf_ratio of the wrongly ranked ones kept), weighted by loss_weights.
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "distill/losses/internal/torch_losses.h"
#include "distill/losses/loss.h"
#include "distill/losses/torchdistill_rule.h"

namespace kd {
namespace {

using losses_internal::ClassWeightSpec;
using losses_internal::CrossEntropy;
using losses_internal::IgnoreIndexSpec;
using losses_internal::KlDiv;
using losses_internal::LabelSmoothingSpec;
using losses_internal::Make;

// The batch's rows split as torchdistill splits them: (unrotated, rotated) of `x`'s rows, with
// the rotated rows' count (int(B * 3 / 4)) and the unrotated ones' (the rest).
struct Views {
  at::Tensor normal, aug;
  int64_t three_forth, one_forth;
};

absl::StatusOr<Views> SplitViews(absl::string_view loss, const at::Tensor& x) {
  const int64_t batch = x.size(0);
  if (batch % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        loss, ": the batch has ", batch,
        " rows, not four views per sample: run the model on SSKDDatasetWrapper's samples "
        "with forward_batch4sskd"));
  }
  // Rows 4i..4i+3 are sample i's views: a view, not a mask, picks them (same order).
  std::vector<int64_t> sizes = {batch / 4, 4};
  sizes.insert(sizes.end(), x.sizes().begin() + 1, x.sizes().end());
  const at::Tensor views = x.reshape(sizes);
  std::vector<int64_t> aug_sizes = {-1};
  aug_sizes.insert(aug_sizes.end(), x.sizes().begin() + 1, x.sizes().end());
  const int64_t three_forth = batch * 3 / 4;
  return Views{views.select(1, 0), views.slice(1, 1).reshape(aug_sizes), three_forth,
               batch - three_forth};
}

// torchdistill's compute_cosine_similarities: (three_forth, one_forth), the cosine of each
// rotated row's output with each unrotated row's.
at::Tensor CosineSimilarities(const Views& v) {
  const at::Tensor normal = v.normal.unsqueeze(2).expand({-1, -1, v.three_forth}).transpose(0, 2);
  const at::Tensor aug = v.aug.unsqueeze(2).expand({-1, -1, v.one_forth});
  return at::cosine_similarity(aug, normal, 1);
}

// Each rotated row's own sample: 0, 0, 0, 1, 1, 1, ...
at::Tensor OwnSamples(const Views& v, const at::Device& device) {
  return at::arange(v.one_forth, at::TensorOptions().dtype(at::kLong))
      .unsqueeze(1)
      .expand({-1, 3})
      .contiguous()
      .view(-1)
      .slice(0, 0, v.three_forth)
      .to(device);
}

// The rows to distil: every row whose label the `scores` rank first, and `ratio` of the others
// (the best ranked first), in row order.
at::Tensor KeptRows(const at::Tensor& scores, const at::Tensor& labels, int64_t rows,
                    double ratio) {
  at::Tensor ranks = at::argsort(scores, /*dim=*/1, /*descending=*/true);
  ranks = at::argmax(at::eq(ranks, labels.unsqueeze(1)).to(at::kLong), 1);
  const at::Tensor order = at::argsort(ranks);
  const int64_t wrong = at::nonzero(ranks).size(0);
  const int64_t keep = rows - wrong + static_cast<int64_t>(static_cast<double>(wrong) * ratio);
  return std::get<0>(at::sort(order.slice(0, 0, keep)));
}

absl::StatusOr<std::unique_ptr<Loss>> MakeAuxSskd(const Kwargs& kwargs) {
  const CrossEntropy ce(kwargs, ReductionKwarg(kwargs));
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    KD_ASSIGN_OR_RETURN(at::Tensor ss, in.Get("AuxSSKDLoss", "ss"));
    KD_ASSIGN_OR_RETURN(const Views views, SplitViews("AuxSSKDLoss", ss));
    return ce(CosineSimilarities(views), OwnSamples(views, ss.device()));
  });
}

absl::StatusOr<std::unique_ptr<Loss>> MakeSskd(const Kwargs& kwargs) {
  const double kl_temp = NumberKwarg(kwargs, "kl_temp");
  const double ss_temp = NumberKwarg(kwargs, "ss_temp");
  const double tf_temp = NumberKwarg(kwargs, "tf_temp");
  const double ss_ratio = NumberKwarg(kwargs, "ss_ratio");
  const double tf_ratio = NumberKwarg(kwargs, "tf_ratio");
  const std::vector<double> weights = NumberListKwarg(kwargs, "loss_weights");
  const std::string reduction = StringKwarg(kwargs, "reduction");
  const CrossEntropy ce(Kwargs{{"ignore_index", int64_t{-100}}, {"label_smoothing", 0.0}},
                        ReductionEnum(reduction == "batchmean" ? "mean" : reduction));
  return Make([=](const LossInputs& in) -> absl::StatusOr<at::Tensor> {
    const char* key = "SSKDLoss";
    KD_ASSIGN_OR_RETURN(at::Tensor s, in.Get(key, "student_linear"));
    KD_ASSIGN_OR_RETURN(at::Tensor t, in.Get(key, "teacher_linear"));
    KD_ASSIGN_OR_RETURN(at::Tensor s_ss, in.Get(key, "student_ss"));
    KD_ASSIGN_OR_RETURN(at::Tensor t_ss, in.Get(key, "teacher_ss"));
    KD_ASSIGN_OR_RETURN(at::Tensor targets, in.Get(key, "targets"));
    KD_RETURN_IF_ERROR(SameShape(key, s, t, "student_linear", "teacher_linear"));
    KD_ASSIGN_OR_RETURN(const Views logits, SplitViews(key, s));
    KD_ASSIGN_OR_RETURN(const Views t_logits, SplitViews(key, t));
    KD_ASSIGN_OR_RETURN(const Views s_views, SplitViews(key, s_ss));
    KD_ASSIGN_OR_RETURN(const Views t_views, SplitViews(key, t_ss));
    if (targets.size(0) != logits.one_forth) {
      return absl::InvalidArgumentError(absl::StrCat(key, ": ", targets.size(0), " targets for ",
                                                     logits.one_forth, " samples (", s.size(0),
                                                     " rows, four views each)"));
    }
    const at::Tensor ce_loss = ce(logits.normal, targets);
    const at::Tensor kl_loss = KlDiv(at::log_softmax(logits.normal / kl_temp, 1),
                                     at::softmax(t_logits.normal / kl_temp, 1), reduction,
                                     /*log_target=*/false) *
                               (kl_temp * kl_temp);
    // Error-level ranking: the rotated rows whose label the teacher ranks well.
    const at::Tensor aug_knowledge = at::softmax(t_logits.aug / tf_temp, 1);
    const at::Tensor aug_targets = targets.unsqueeze(1)
                                       .expand({-1, 3})
                                       .contiguous()
                                       .view(-1)
                                       .slice(0, 0, logits.three_forth)
                                       .to(at::kLong)
                                       .to(s.device());
    const at::Tensor tf_rows = KeptRows(aug_knowledge, aug_targets, logits.three_forth, tf_ratio);
    // The same for the similarities: the rows whose own sample the teacher ranks well.
    const at::Tensor s_cos = CosineSimilarities(s_views);
    const at::Tensor t_cos = CosineSimilarities(t_views).detach();
    const at::Tensor ss_rows =
        KeptRows(t_cos, OwnSamples(t_views, s.device()), logits.three_forth, ss_ratio);
    const at::Tensor ss_loss =
        KlDiv(at::log_softmax(s_cos.index({ss_rows}) / ss_temp, 1),
              at::softmax(t_cos.index({ss_rows}) / ss_temp, 1), reduction, false) *
        (ss_temp * ss_temp);
    const at::Tensor log_aug = at::log_softmax(logits.aug / tf_temp, 1);
    const at::Tensor tf_loss =
        KlDiv(log_aug.index({tf_rows}), aug_knowledge.index({tf_rows}), reduction, false) *
        (tf_temp * tf_temp);
    const at::Tensor parts[] = {ce_loss, kl_loss, ss_loss, tf_loss};
    at::Tensor total = at::zeros({}, s.options());
    for (size_t i = 0; i < weights.size() && i < 4; ++i) total = total + weights[i] * parts[i];
    return total;
  });
}

KwargSpec Temperature(const char* name, const char* doc) {
  return {.name = name,
          .type = KwargType::kNumber,
          .doc = doc,
          .min = 0,
          .min_exclusive = true,
          .required = true};
}
KwargSpec Ratio(const char* name, const char* doc) {
  return {
      .name = name, .type = KwargType::kNumber, .doc = doc, .min = 0, .max = 1, .required = true};
}

KD_REGISTER(LossRegistry(), "AuxSSKDLoss", MakeAuxSskd,
            {ClassWeightSpec(),
             IgnoreIndexSpec(),
             LabelSmoothingSpec(),
             {.name = "reduction",
              .type = KwargType::kString,
              .doc = "the cross-entropy's",
              .default_value = std::string("mean"),
              .choices = {"mean", "sum", "none"}}});
KD_REGISTER(LossRegistry(), "SSKDLoss", MakeSskd,
            {Temperature("kl_temp", "the unrotated rows' KD temperature"),
             Temperature("ss_temp", "the similarities' temperature"),
             Temperature("tf_temp", "the rotated rows' KD temperature"),
             Ratio("ss_ratio", "the share of wrongly ranked similarity rows kept"),
             Ratio("tf_ratio", "the share of wrongly ranked rotated rows kept"),
             {.name = "loss_weights",
              .type = KwargType::kNumberList,
              .doc = "the weights of CE, KL, the similarities' KL and the rotated rows' KL",
              .default_value = std::vector<double>{1.0, 1.0, 1.0, 1.0}},
             {.name = "reduction",
              .type = KwargType::kString,
              .doc = "the KL terms' (the CE's is mean for batchmean)",
              .default_value = std::string("batchmean"),
              .choices = {"batchmean", "mean", "sum"}}});

// torchdistill's forms: AuxSSKDLoss reads the teacher's self-supervision module (module_path,
// default "ss_module"); SSKDLoss both models' linear (classifier) and self-supervision modules,
// and the labels.
KD_REGISTER(TorchdistillLossRules(), "AuxSSKDLoss",
            TorchdistillLossRule{.values = {{.arg = "ss",
                                             .from_teacher = true,
                                             .path_kwarg = "module_path",
                                             .io_kwarg = "module_io",
                                             .default_path = "ss_module"}}},
            kAnyKwargs);
KD_REGISTER(TorchdistillLossRules(), "SSKDLoss",
            TorchdistillLossRule{.values = {{.arg = "student_linear",
                                             .path_kwarg = "student_linear_module_path",
                                             .io_kwarg = "student_linear_module_io"},
                                            {.arg = "teacher_linear",
                                             .from_teacher = true,
                                             .path_kwarg = "teacher_linear_module_path",
                                             .io_kwarg = "teacher_linear_module_io"},
                                            {.arg = "student_ss",
                                             .path_kwarg = "student_ss_module_path",
                                             .io_kwarg = "student_ss_module_io"},
                                            {.arg = "teacher_ss",
                                             .from_teacher = true,
                                             .path_kwarg = "teacher_ss_module_path",
                                             .io_kwarg = "teacher_ss_module_io"}},
                                 .reads_targets = true},
            kAnyKwargs);

}  // namespace
}  // namespace kd
