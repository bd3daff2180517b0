// The plugin kinds a DistillConfig chooses by key, as registry kinds: a registry created with
// kd::NewGlobalRegistry under one of these names is the one ValidateConfig checks keys and
// kwargs against. The process-function kinds are in distill/config/proc_fields.h.
//
//   kd::Registry<LossFactory>& LossRegistry() {
//     static auto* const registry =
//         kd::NewGlobalRegistry<LossFactory>(std::string(kd::kLossKind));
//     return *registry;
//   }
#ifndef LIBKD_DISTILL_CONFIG_PLUGIN_KINDS_H_
#define LIBKD_DISTILL_CONFIG_PLUGIN_KINDS_H_

#include "absl/strings/string_view.h"

namespace kd {

// ModelConfig.native
inline constexpr absl::string_view kModelKind = "model";
// DatasetConfig
inline constexpr absl::string_view kDatasetKind = "dataset";
// DatasetConfig.wrapper
inline constexpr absl::string_view kDatasetWrapperKind = "dataset_wrapper";
// LoaderConfig.sampler
inline constexpr absl::string_view kSamplerKind = "sampler";
// AuxiliaryModuleConfig
inline constexpr absl::string_view kAuxiliaryModuleKind = "auxiliary_module";
// LossTermConfig
inline constexpr absl::string_view kLossKind = "loss";
// OptimizerConfig
inline constexpr absl::string_view kOptimizerKind = "optimizer";
// SchedulerConfig
inline constexpr absl::string_view kSchedulerKind = "scheduler";
// MetricConfig
inline constexpr absl::string_view kMetricKind = "metric";

// The kinds above, in that order.
inline constexpr absl::string_view kConfigPluginKinds[] = {
    kModelKind, kDatasetKind,   kDatasetWrapperKind, kSamplerKind, kAuxiliaryModuleKind,
    kLossKind,  kOptimizerKind, kSchedulerKind,      kMetricKind};

}  // namespace kd

#endif  // LIBKD_DISTILL_CONFIG_PLUGIN_KINDS_H_
