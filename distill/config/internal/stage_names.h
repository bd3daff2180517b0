// The names of a config's stages, which name files in the run folder: plain names, none of
// the run's own checkpoint names, each stage's its own (config_validator's stage-name check).
#ifndef LIBKD_DISTILL_CONFIG_INTERNAL_STAGE_NAMES_H_
#define LIBKD_DISTILL_CONFIG_INTERNAL_STAGE_NAMES_H_

#include <string>

#include "distill/config/config_loader.h"
#include "distill/config/distill_config.pb.h"
#include "distill/config/internal/checker.h"

namespace kd {
namespace config_internal {

// A name that becomes part of a file or folder name in the run folder: not a path (no '/' or
// '\\', not "." or ".."), no control characters, and short enough that the longest file made
// from it ("teacher_cache.<name>.rank<N>.bin") stays under the file system's 255 bytes.
bool IsPlainName(const std::string& name);
inline constexpr char kPlainNameRule[] =
    "(no '/' or '\\', not '.' or '..', no control characters, at most 200 bytes)";

// Every stage's name (`train`'s included; stage<i> where unnamed): a plain name, not last,
// best or <x>_epoch<N> (the run's checkpoints), not another stage's. Each problem at its field.
void CheckStageNames(const DistillConfig& config, const ConfigLocator& root, Checker& checker);

}  // namespace config_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_CONFIG_INTERNAL_STAGE_NAMES_H_
