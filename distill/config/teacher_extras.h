// What keeps a stage's teacher cache (StageConfig.teacher_cache) or its teacher overlap
// (overlap_teacher) from giving the run without them, as far as the config shows: one rule for
// the validator (mode ON refused at its field) and the stage (AUTO left off, saying why), which
// adds what only a built box knows (the device, the dataset's transforms, the cores).
#ifndef LIBKD_DISTILL_CONFIG_TEACHER_EXTRAS_H_
#define LIBKD_DISTILL_CONFIG_TEACHER_EXTRAS_H_

#include <cstdint>
#include <string>

#include "distill/config/distill_config.pb.h"

namespace kd {

// TeacherCacheConfig.lookahead_rows when the field is unset.
inline constexpr int64_t kDefaultLookaheadRows = 128;

// The look-ahead's rows of `cache`: its field, or kDefaultLookaheadRows.
inline int64_t LookaheadRows(const TeacherCacheConfig& cache) {
  return cache.has_lookahead_rows() ? cache.lookahead_rows() : kDefaultLookaheadRows;
}

// Why the cache could not be exact in `stage` of a run with or without a teacher ("" if
// nothing the config shows): no teacher, a teacher that trains, a teacher forward process
// other than forward_batch_only, hooks that accumulate, a wrapped training dataset
// (`train_dataset`, the config of the stage's training dataset; null: not checked).
std::string TeacherCacheObstacle(const StageConfig& stage, bool has_teacher,
                                 const DatasetConfig* train_dataset);

// Why running the teacher a batch ahead would change the run ("" if nothing the config
// shows): no teacher, a teacher that trains, a pre-forward process other than the default
// (it would run on the next batch before this one's step).
std::string TeacherOverlapObstacle(const StageConfig& stage, bool has_teacher);

// Why fetching the coming batches early would change the run ("" if nothing): a pre-forward
// process other than the default (it would run on them before this batch's step).
std::string PreForwardObstacle(const StageConfig& stage);

}  // namespace kd

#endif  // LIBKD_DISTILL_CONFIG_TEACHER_EXTRAS_H_
