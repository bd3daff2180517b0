// Process functions: the pre-epoch, pre-forward, forward, post-forward and post-epoch steps of
// training that torchdistill lets users replace by key, their five registries, and how a
// config chooses one.
//
//   // Register from any library (a .cc in a cc_library with alwayslink = True):
//   absl::Status ScaleSamples(kd::TrainingContext& box, kd::Batch& batch,
//                             const kd::Kwargs& kwargs) { ... }
//   KD_REGISTER_PROC_FUNC(kd::PreForwardProc, "scale_samples", ScaleSamples,
//                         {{"factor", kd::KwargType::kNumber, "multiplies the samples"}});
//
//   // Build from a config (`pre_forward_proc { key: "scale_samples" kwargs {...} }`) and call.
//   // The config's kwargs are defaults; kwargs given at the call take precedence.
//   KD_ASSIGN_OR_RETURN(kd::ProcFunc<kd::PreForwardProc> proc,
//                       kd::BuildStageProcFunc<kd::PreForwardProc>(stage, /*with_teacher=*/true));
//   KD_RETURN_IF_ERROR(proc(box, batch, {{"factor", 2.0}}));
//
// Signatures (torchdistill's, with the box as a TrainingContext and errors as statuses):
//   pre-epoch     absl::Status(TrainingContext& box, int64_t epoch, const Kwargs&)
//   pre-forward   absl::Status(TrainingContext& box, Batch& batch, const Kwargs&)
//   forward       absl::StatusOr<c10::IValue>(Model& model, const Batch& batch, const Kwargs&)
//   post-forward  absl::Status(TrainingContext& box, const at::Tensor& loss,
//                              std::optional<double> metric, const Kwargs&)
//   post-epoch    absl::Status(TrainingContext& box, std::optional<double> metric, const Kwargs&)
// A c10::Error or std::exception thrown inside becomes an Internal status naming the function.
#ifndef LIBKD_DISTILL_PROCS_PROC_FUNC_H_
#define LIBKD_DISTILL_PROCS_PROC_FUNC_H_

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/ivalue_util.h"
#include "base/kwargs.h"
#include "base/registry.h"
#include "base/status_macros.h"
#include "distill/config/distill_config.pb.h"
#include "distill/config/kwargs.h"
#include "distill/config/plugin_config.pb.h"
#include "distill/config/proc_fields.h"
#include "distill/data/batch.h"
#include "distill/procs/training_context.h"
#include "hooks/model.h"

namespace kd {

namespace procs_internal {

// Internal: `<kind> "<key>" failed: <what>`, keeping what_without_backtrace() of c10 errors.
absl::Status Failure(absl::string_view kind, absl::string_view key, const std::exception& e);

// A process function bound to its key and default kwargs.
template <typename Kind, typename R, typename... A>
class BoundProc {
 public:
  // The function type registered for this kind.
  using Fn = std::function<R(A..., const Kwargs&)>;

  BoundProc(std::string key, Fn fn, Kwargs kwargs)
      : key_(std::move(key)), fn_(std::move(fn)), kwargs_(std::move(kwargs)) {}

  // The registry key it was built from.
  const std::string& key() const { return key_; }
  // The default kwargs (from the config).
  const Kwargs& kwargs() const { return kwargs_; }

  // Calls the function with the default kwargs.
  R operator()(A... args) const {
    try {
      return fn_(std::forward<A>(args)..., kwargs_);
    } catch (const std::exception& e) {
      return Failure(Kind::kKind, key_, e);
    }
  }

  // Calls the function with the default kwargs overridden by `kwargs`.
  R operator()(A... args, const Kwargs& kwargs) const {
    try {
      if (kwargs.empty()) return fn_(std::forward<A>(args)..., kwargs_);
      if (kwargs_.empty()) return fn_(std::forward<A>(args)..., kwargs);
      return fn_(std::forward<A>(args)..., MergeKwargs(kwargs_, kwargs));
    } catch (const std::exception& e) {
      return Failure(Kind::kKind, key_, e);
    }
  }

 private:
  std::string key_;
  Fn fn_;
  Kwargs kwargs_;
};

}  // namespace procs_internal

// The five kinds. kKind is the registry kind and the config field name; kDeprecatedKey the
// field's deprecated long name (torchdistill's); kDefaultKey / kDefaultKeyWithoutTeacher the
// key used when a config names none (torchdistill's defaults); Bound the callable that
// BuildProcFunc makes.
struct PreEpochProc {
  static constexpr absl::string_view kKind = kPreEpochProcKind;
  static constexpr absl::string_view kDeprecatedKey = kPreEpochProcDeprecated;
  static constexpr absl::string_view kDefaultKey = "default_pre_epoch_process_with_teacher";
  static constexpr absl::string_view kDefaultKeyWithoutTeacher =
      "default_pre_epoch_process_without_teacher";
  using Bound = procs_internal::BoundProc<PreEpochProc, absl::Status, TrainingContext&, int64_t>;
};
struct PreForwardProc {
  static constexpr absl::string_view kKind = kPreForwardProcKind;
  static constexpr absl::string_view kDeprecatedKey = kPreForwardProcDeprecated;
  static constexpr absl::string_view kDefaultKey = "default_pre_forward_process";
  static constexpr absl::string_view kDefaultKeyWithoutTeacher = "default_pre_forward_process";
  using Bound = procs_internal::BoundProc<PreForwardProc, absl::Status, TrainingContext&, Batch&>;
};
struct ForwardProc {
  static constexpr absl::string_view kKind = kForwardProcKind;
  static constexpr absl::string_view kDeprecatedKey = "";
  static constexpr absl::string_view kDefaultKey = "forward_batch_only";
  static constexpr absl::string_view kDefaultKeyWithoutTeacher = "forward_batch_only";
  using Bound =
      procs_internal::BoundProc<ForwardProc, absl::StatusOr<c10::IValue>, Model&, const Batch&>;
};
struct PostForwardProc {
  static constexpr absl::string_view kKind = kPostForwardProcKind;
  static constexpr absl::string_view kDeprecatedKey = kPostForwardProcDeprecated;
  static constexpr absl::string_view kDefaultKey = "default_post_forward_process";
  static constexpr absl::string_view kDefaultKeyWithoutTeacher = "default_post_forward_process";
  using Bound = procs_internal::BoundProc<PostForwardProc, absl::Status, TrainingContext&,
                                         const at::Tensor&, std::optional<double>>;
};
struct PostEpochProc {
  static constexpr absl::string_view kKind = kPostEpochProcKind;
  static constexpr absl::string_view kDeprecatedKey = kPostEpochProcDeprecated;
  static constexpr absl::string_view kDefaultKey = "default_post_epoch_process_with_teacher";
  static constexpr absl::string_view kDefaultKeyWithoutTeacher =
      "default_post_epoch_process_without_teacher";
  using Bound = procs_internal::BoundProc<PostEpochProc, absl::Status, TrainingContext&,
                                         std::optional<double>>;
};

// A process function of `Kind` ready to call; the function type a plugin registers.
template <typename Kind>
using ProcFunc = typename Kind::Bound;
template <typename Kind>
using ProcFn = typename Kind::Bound::Fn;

// The global registry of `Kind` (defined for the five kinds above).
template <typename Kind>
Registry<ProcFn<Kind>>& ProcRegistry();

// Registers a process function at start-up:
//   KD_REGISTER_PROC_FUNC(kind, key, fn, kwarg_specs);   // or kd::kAnyKwargs
// with `kind` one of kd::PreEpochProc, kd::PreForwardProc, kd::ForwardProc,
// kd::PostForwardProc, kd::PostEpochProc.
#define KD_REGISTER_PROC_FUNC(kind, ...) KD_REGISTER(::kd::ProcRegistry<kind>(), __VA_ARGS__)

// The key used when a config names none, in a box with or without a teacher.
template <typename Kind>
constexpr absl::string_view DefaultProcKey(bool with_teacher) {
  return with_teacher ? Kind::kDefaultKey : Kind::kDefaultKeyWithoutTeacher;
}

// `kind "key"`, the way messages name a process function.
template <typename Kind>
std::string ProcOwnerName(absl::string_view key) {
  return absl::StrCat(Kind::kKind, " \"", key, "\"");
}

// The function registered under `key`, bound to default `kwargs`. NotFound listing the
// registered keys; InvalidArgument naming kwargs that break its contract (names, types, ranges).
template <typename Kind>
absl::StatusOr<ProcFunc<Kind>> BuildProcFunc(absl::string_view key, Kwargs kwargs = {}) {
  Registry<ProcFn<Kind>>& registry = ProcRegistry<Kind>();
  KD_ASSIGN_OR_RETURN(const ProcFn<Kind>* fn, registry.Get(key));
  KD_ASSIGN_OR_RETURN(Kwargs resolved,
                      ResolvePluginKwargs(registry, key, kwargs, ProcOwnerName<Kind>(key)));
  return ProcFunc<Kind>(std::string(key), *fn, std::move(resolved));
}

// The function a config names: `{key: "..." kwargs {...}}`, its kwargs the defaults.
template <typename Kind>
absl::StatusOr<ProcFunc<Kind>> BuildProcFunc(const PluginConfig& config) {
  Registry<ProcFn<Kind>>& registry = ProcRegistry<Kind>();
  KD_RETURN_IF_ERROR(registry.CheckKey(config.key()));
  KD_ASSIGN_OR_RETURN(Kwargs kwargs, PluginKwargs(registry, config.key(), config.kwargs(),
                                                  ProcOwnerName<Kind>(config.key())));
  return BuildProcFunc<Kind>(config.key(), std::move(kwargs));
}

// GetProcConfig (a stage's process-function field under either name): distill/config/proc_fields.h.

// The stage's process function of `Kind` (not ForwardProc), or DefaultProcKey when unset.
template <typename Kind>
absl::StatusOr<ProcFunc<Kind>> BuildStageProcFunc(const StageConfig& stage, bool with_teacher) {
  KD_ASSIGN_OR_RETURN(const PluginConfig* config, GetProcConfig(stage, Kind::kKind));
  if (config == nullptr) return BuildProcFunc<Kind>(DefaultProcKey<Kind>(with_teacher));
  return BuildProcFunc<Kind>(*config);
}

// The forward process of a model in a stage, or "forward_batch_only" when unset.
absl::StatusOr<ProcFunc<ForwardProc>> BuildForwardProcFunc(const StageModelConfig& model);

}  // namespace kd

#endif  // LIBKD_DISTILL_PROCS_PROC_FUNC_H_
