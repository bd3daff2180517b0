// The process-function fields of a config: their names (each also its registry's kind), the
// deprecated long names torchdistill used, and reading a stage's field under either name. Here,
// not in distill/procs, so that the config's validator reads them without including the
// process functions (which include the config: distill/procs -> distill/config, one way).
#ifndef LIBKD_DISTILL_CONFIG_PROC_FIELDS_H_
#define LIBKD_DISTILL_CONFIG_PROC_FIELDS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "distill/config/distill_config.pb.h"
#include "distill/config/plugin_config.pb.h"

namespace kd {

// Field names, and the registry kinds of distill/procs/proc_func.h.
inline constexpr absl::string_view kPreEpochProcKind = "pre_epoch_proc";
inline constexpr absl::string_view kPreForwardProcKind = "pre_forward_proc";
inline constexpr absl::string_view kForwardProcKind = "forward_proc";  // StageModelConfig's
inline constexpr absl::string_view kPostForwardProcKind = "post_forward_proc";
inline constexpr absl::string_view kPostEpochProcKind = "post_epoch_proc";

// torchdistill's long names of the four stage-level fields, deprecated.
inline constexpr absl::string_view kPreEpochProcDeprecated = "pre_epoch_process";
inline constexpr absl::string_view kPreForwardProcDeprecated = "pre_forward_process";
inline constexpr absl::string_view kPostForwardProcDeprecated = "post_forward_process";
inline constexpr absl::string_view kPostEpochProcDeprecated = "post_epoch_process";

// The config of a stage's process function `key`: "pre_epoch_proc", "pre_forward_proc",
// "post_forward_proc" or "post_epoch_proc", or a deprecated long name ("pre_epoch_process",
// ...), which means the same. Returns the field set under either name, nullptr if neither is.
// InvalidArgument if both names are set, or if `key` names no stage process function.
absl::StatusOr<const PluginConfig*> GetProcConfig(const StageConfig& stage, absl::string_view key);

// The registry key of the stage's process function `key` under either name; "" when unset (or
// when GetProcConfig refuses the stage, which the validator reports).
std::string ProcKey(const StageConfig& stage, absl::string_view key);

}  // namespace kd

#endif  // LIBKD_DISTILL_CONFIG_PROC_FIELDS_H_
