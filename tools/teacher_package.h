// The default job's package teacher (//tools:distill --teacher_format=aoti): part 1's trained
// teacher exported as an AOTInductor package by tools/export_teacher.py, run by the venv's
// Python on the teacher's Python twin (distill/models/fashion_cnn.py).
#ifndef LIBKD_TOOLS_TEACHER_PACKAGE_H_
#define LIBKD_TOOLS_TEACHER_PACKAGE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "distill/config/distill_config.pb.h"

namespace kd {

// The Python that runs tools/export_teacher.py, and the folder holding it and the teacher's
// Python twin: the runfiles under `bazel run`, else the source tree.
struct PackageExporter {
  std::string python;
  std::string root;
};

// `python` (--python; empty: $LIBKD_VENV/bin/python, else ~/.cache/libkd/venv/bin/python) and
// the scripts' folder, checked before anything trains: InvalidArgument for no executable
// Python, FailedPrecondition for scripts found nowhere, each naming the fix.
absl::StatusOr<PackageExporter> FindPackageExporter(const std::string& python);

// Exports part 1's teacher (`teacher_config`'s fashion_cnn with the state dict at `state`) as
// the package `package`, with the module values `kd_config` hooks on its teacher as extra
// outputs; the exporter's output goes to `log`. InvalidArgument for a teacher other than
// fashion_cnn or kwargs that are not numbers or booleans; Internal when the export fails,
// naming the log.
absl::Status ExportTeacherPackage(const PackageExporter& exporter,
                                  const DistillConfig& teacher_config,
                                  const DistillConfig& kd_config, const std::string& state,
                                  const std::string& package, const std::string& log);

}  // namespace kd

#endif  // LIBKD_TOOLS_TEACHER_PACKAGE_H_
