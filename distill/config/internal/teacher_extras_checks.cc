#include "distill/config/internal/teacher_extras_checks.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "distill/config/teacher_extras.h"

namespace kd {
namespace config_internal {

// teacher_cache and overlap_teacher: mode ON where the config shows it would not give the
// run without them is refused (the stage checks the rest when the box is made).
void CheckTeacherExtras(const DistillConfig& config, const StageConfig& stage,
                        const ConfigLocator& loc, bool has_teacher, Checker& checker) {
  if (stage.has_teacher_cache()) {
    const ConfigLocator cache = loc.Nested("teacher_cache");
    checker.AtLeast(cache, "memory_mib", stage.teacher_cache().memory_mib(), int64_t{0});
    checker.AtLeast(cache, "lookahead_rows", stage.teacher_cache().lookahead_rows(), 0);
    checker.AtLeast(cache, "disk_mib", stage.teacher_cache().disk_mib(), int64_t{0});
    // MiB counts that overflow bytes in 64 bits (2^43 MiB is 8 EiB).
    for (const auto& [field, mib] :
         {std::pair<const char*, int64_t>{"memory_mib", stage.teacher_cache().memory_mib()},
          {"disk_mib", stage.teacher_cache().disk_mib()}}) {
      if (mib > (int64_t{1} << 30)) {
        checker.Add(cache.Of(field),
                    absl::StrCat(field, " must be <= 1073741824 (1 PiB), got ", mib));
      }
    }
    if (stage.teacher_cache().mode() == ON) {
      const DatasetConfig* train = nullptr;
      for (const DatasetConfig& dataset : config.datasets()) {
        if (dataset.id() == stage.train_data_loader().dataset_id()) train = &dataset;
      }
      if (const std::string why = TeacherCacheObstacle(stage, has_teacher, train);
          !why.empty()) {
        checker.Add(cache.Of("mode"), absl::StrCat("teacher_cache mode ON, but the cache cannot "
                                                   "be exact: ",
                                                   why, "; set mode AUTO or OFF"));
      }
    }
  }
  if (stage.overlap_teacher() == ON) {
    if (const std::string why = TeacherOverlapObstacle(stage, has_teacher); !why.empty()) {
      checker.Add(loc.Of("overlap_teacher"),
                  absl::StrCat("overlap_teacher ON, but the overlap would not give the "
                               "sequential run: ",
                               why, "; set AUTO or OFF"));
    }
  }
}

}  // namespace config_internal
}  // namespace kd
