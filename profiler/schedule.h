// torch.profiler.schedule in C++: which action a profiling step takes.
//
//   kd::ProfilerSchedule schedule{.wait = 1, .warmup = 1, .active = 2, .repeat = 2};
//   KD_RETURN_IF_ERROR(kd::ValidateSchedule(schedule));
//   kd::ProfilerAction action = kd::ScheduleAction(schedule, step);  // step counts from 0
//
// The same answers as Python's for every step (profiler/schedule_test.cc compares them with
// answers recorded from torch.profiler.schedule itself): skip `skip_first` steps, then cycles of
// `wait` steps doing nothing, `warmup` steps with the profiler prepared, `active` steps recorded,
// the last of them saving the trace; `repeat` cycles (0: until the profiler stops).
#ifndef LIBKD_PROFILER_SCHEDULE_H_
#define LIBKD_PROFILER_SCHEDULE_H_

#include <cstdint>

#include "absl/status/status.h"

namespace kd {

// torch.profiler.ProfilerAction, without DEVICE_STOPPED (internal to Python's profiler).
enum class ProfilerAction { kNone, kWarmup, kRecord, kRecordAndSave };

// silverspoon-kd's create_profiler defaults: wait 20, warmup 3, active 3, repeat 1.
struct ProfilerSchedule {
  int64_t wait = 20;
  int64_t warmup = 3;
  int64_t active = 3;
  int64_t repeat = 1;      // cycles; 0: until stopped
  int64_t skip_first = 0;  // steps skipped before the first cycle
};

// InvalidArgument naming each bad value (wait, warmup, repeat, skip_first >= 0; active > 0), as
// torch.profiler.schedule's own check.
absl::Status ValidateSchedule(const ProfilerSchedule& schedule);

// The action of step `step` (>= 0) of a valid schedule.
ProfilerAction ScheduleAction(const ProfilerSchedule& schedule, int64_t step);

}  // namespace kd

#endif  // LIBKD_PROFILER_SCHEDULE_H_
