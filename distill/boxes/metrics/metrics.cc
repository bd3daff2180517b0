#include "distill/boxes/metrics/metrics.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "distill/config/kwargs.h"
#include "distill/config/plugin_kinds.h"

namespace kd {
namespace {

// The fraction of samples whose target is among the top_k outputs.
class Accuracy final : public Metric {
 public:
  explicit Accuracy(int64_t k) : k_(k) {}
  void Reset() override { correct_ = total_ = 0; }
  void Update(const at::Tensor& output, const at::Tensor& targets) override {
    const int64_t k = std::min<int64_t>(k_, output.size(1));
    const at::Tensor top = std::get<1>(output.topk(k, 1));
    correct_ += top.eq(targets.view({-1, 1})).any(1).sum().item<int64_t>();
    total_ += targets.size(0);
  }
  double Value() const override {
    return total_ == 0 ? 0.0 : static_cast<double>(correct_) / static_cast<double>(total_);
  }
  std::vector<double> Sums() const override {
    return {static_cast<double>(correct_), static_cast<double>(total_)};
  }
  void SetSums(const std::vector<double>& sums) override {
    TORCH_CHECK(sums.size() == 2, "accuracy: 2 sums expected, got ", sums.size());
    correct_ = static_cast<int64_t>(sums[0]);
    total_ = static_cast<int64_t>(sums[1]);
  }

 private:
  int64_t k_;
  int64_t correct_ = 0, total_ = 0;
};

KD_REGISTER(MetricRegistry(), "accuracy",
            ([](const Kwargs& kwargs) -> absl::StatusOr<std::unique_ptr<Metric>> {
              return std::unique_ptr<Metric>(std::make_unique<Accuracy>(IntKwarg(kwargs, "top_k")));
            }),
            {{.name = "top_k",
              .type = KwargType::kInteger,
              .doc = "a hit if the target is among the k largest outputs",
              .default_value = 1,
              .min = 1}});

}  // namespace

Registry<MetricFactory>& MetricRegistry() {
  static Registry<MetricFactory>* const registry =
      NewGlobalRegistry<MetricFactory>(std::string(kMetricKind));
  return *registry;
}

absl::StatusOr<std::unique_ptr<Metric>> MakeMetric(absl::string_view key, const Kwargs& kwargs) {
  KD_ASSIGN_OR_RETURN(const MetricFactory* factory, MetricRegistry().Get(key));
  KD_ASSIGN_OR_RETURN(
      const Kwargs resolved,
      ResolvePluginKwargs(MetricRegistry(), key, kwargs, absl::StrCat("metric \"", key, "\"")));
  return (*factory)(resolved);
}

}  // namespace kd
