// Evaluation metrics by config key (EvaluationConfig.metrics), accumulated over the batches of
// a validation loader.
//
//   KD_ASSIGN_OR_RETURN(std::unique_ptr<kd::Metric> top5,
//                       kd::MakeMetric("accuracy", {{"top_k", int64_t{5}}}));
//   for (...) top5->Update(logits, targets);
//   double value = top5->Value();
#ifndef LIBKD_DISTILL_BOXES_METRICS_METRICS_H_
#define LIBKD_DISTILL_BOXES_METRICS_METRICS_H_

#include <functional>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/ivalue_util.h"
#include "base/registry.h"

namespace kd {

class Metric {
 public:
  virtual ~Metric() = default;
  virtual void Reset() = 0;
  // One batch: the model's output (logits, (N, C)) and the targets (N).
  virtual void Update(const at::Tensor& output, const at::Tensor& targets) = 0;
  virtual double Value() const = 0;
  // What the metric has accumulated, as sums that add across disjoint parts of the data (for
  // accuracy: hits and samples). A multi-process evaluation adds every rank's Sums() and puts
  // the totals back with SetSums, after which Value() is the whole set's.
  virtual std::vector<double> Sums() const = 0;
  virtual void SetSums(const std::vector<double>& sums) = 0;
};

using MetricFactory = std::function<absl::StatusOr<std::unique_ptr<Metric>>(const Kwargs&)>;

// The metrics by config key ("metric" registry kind): "accuracy" (top_k, 1).
Registry<MetricFactory>& MetricRegistry();

absl::StatusOr<std::unique_ptr<Metric>> MakeMetric(absl::string_view key, const Kwargs& kwargs);

}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_METRICS_METRICS_H_
