// The files a config makes a run write, against those it reads: a dst_ckpt that is a model's
// file, a src_ckpt, resume_from or the config itself (by identity: links and `..` included), or
// another dst_ckpt, is a problem at its field.
#ifndef LIBKD_DISTILL_CONFIG_INTERNAL_OUTPUT_FILES_H_
#define LIBKD_DISTILL_CONFIG_INTERNAL_OUTPUT_FILES_H_

#include "distill/config/config_loader.h"
#include "distill/config/distill_config.pb.h"
#include "distill/config/internal/checker.h"

namespace kd {
namespace internal {

void CheckOutputFiles(const DistillConfig& config, const ConfigLocator& root, Checker& checker);

}  // namespace internal
}  // namespace kd

#endif  // LIBKD_DISTILL_CONFIG_INTERNAL_OUTPUT_FILES_H_
