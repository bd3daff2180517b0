// The files a config makes a run write (dst_ckpt files, the memory snapshot), against those it
// reads: an output that is a model's file, a src_ckpt, resume_from, the config itself or a
// dataset's file (by identity: links and `..` included), that lies inside a dataset's folder
// (a string kwarg naming an existing folder, as its root), or that is another output, is a
// problem at its field.
#ifndef LIBKD_DISTILL_CONFIG_INTERNAL_OUTPUT_FILES_H_
#define LIBKD_DISTILL_CONFIG_INTERNAL_OUTPUT_FILES_H_

#include "distill/config/config_loader.h"
#include "distill/config/distill_config.pb.h"
#include "distill/config/internal/checker.h"

namespace kd {
namespace config_internal {

void CheckOutputFiles(const DistillConfig& config, const ConfigLocator& root, Checker& checker);

}  // namespace config_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_CONFIG_INTERNAL_OUTPUT_FILES_H_
