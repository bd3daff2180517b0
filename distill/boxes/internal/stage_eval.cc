// The stage's evaluation: validation and test loss and metrics of the student, summed across
// ranks in a multi-process run.
#include <map>
#include <memory>
#include <string>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "distill/boxes/internal/stage_impl.h"
#include "distill/boxes/io_util.h"
#include "distill/models/next_token.h"
#include "memdiag/tracking_allocator.h"

namespace kd {
namespace boxes_internal {

absl::StatusOr<std::map<std::string, double>> Stage::Test(
    const LoaderConfig& loader, const std::map<std::string, std::shared_ptr<Dataset>>& datasets,
    int64_t seed) {
  KD_ASSIGN_OR_RETURN(std::unique_ptr<DataLoader> test,
                      MakeLoader(loader, datasets, seed, "test_data_loader", world_size(), rank(),
                                 /*exact_shards=*/true));
  return EvaluateOn(*test);
}

absl::StatusOr<std::map<std::string, double>> Stage::EvaluateOn(DataLoader& loader) {
  RECORD_USER_SCOPE("eval");
  std::map<std::string, double> out;
  Model& student = *evaluated_student_;
  const bool was_training = student.is_training();
  student.SetTraining(false);
  at::NoGradGuard no_grad;
  for (auto& [name, metric] : metrics_) metric->Reset();
  double loss_sum = 0;
  int64_t count = 0;
  loader.SetEpoch(0);
  BatchStream batches(loader);
  for (int64_t i = 0; i < loader.num_batches(); ++i) {
    if (leaks_.callback != nullptr) leaks_.callback->OnPredictionStep();
    ScopedMemoryAnnotation scope("eval", i + 1);
    Batch batch = batches.Next();
    ToDevice(batch);
    std::optional<AutocastGuard> autocast;
    Autocast(autocast);
    KD_ASSIGN_OR_RETURN(c10::IValue output, (*eval_forward_)(student, batch));
    student_hooks_.ClearIoDict();
    KD_ASSIGN_OR_RETURN(const at::Tensor logits, OutputTensor(output, "student"));
    if (!logits.defined() || !batch.targets.isTensor()) {
      return absl::InvalidArgumentError(
          "evaluation needs the student's logits (a tensor output, or a dict output's "
          "\"logits\") and tensor targets");
    }
    const at::Tensor targets = batch.targets.toTensor();
    if (logits.dim() == 3 && targets.dim() == 2) {
      // A causal LM's (B, T, V) logits and (B, T) labels in transformers' convention: the loss
      // is the mean next-token NLL over the tokens with a label (the log of the perplexity).
      const at::Tensor next = NextTokenLabels(targets).reshape(-1);
      loss_sum += at::cross_entropy_loss(logits.reshape({-1, logits.size(2)}).to(at::kFloat),
                                         next, {}, at::Reduction::Sum, /*ignore_index=*/-100)
                      .item<double>();
      count += next.ne(-100).sum().item<int64_t>();
    } else {
      loss_sum += at::cross_entropy_loss(logits, targets, {}, at::Reduction::Sum).item<double>();
      count += targets.size(0);
    }
    for (auto& [name, metric] : metrics_) metric->Update(logits, targets);
  }
  if (leaks_.callback != nullptr) leaks_.callback->OnEvaluate();
  if (distributed()) AddAcrossRanks(*group_, device_, loss_sum, count, metrics_);
  out["loss"] = count == 0 ? 0.0 : loss_sum / static_cast<double>(count);
  for (auto& [name, metric] : metrics_) out[name] = metric->Value();
  student.SetTraining(was_training);
  return out;
}

}  // namespace boxes_internal
}  // namespace kd
