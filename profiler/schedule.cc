#include "profiler/schedule.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kd {

absl::Status ValidateSchedule(const ProfilerSchedule& s) {
  std::vector<std::string> bad;
  if (s.wait < 0) bad.push_back(absl::StrCat("wait=", s.wait, " (need >= 0)"));
  if (s.warmup < 0) bad.push_back(absl::StrCat("warmup=", s.warmup, " (need >= 0)"));
  if (s.active <= 0) bad.push_back(absl::StrCat("active=", s.active, " (need > 0)"));
  if (s.repeat < 0) bad.push_back(absl::StrCat("repeat=", s.repeat, " (need >= 0)"));
  if (s.skip_first < 0) bad.push_back(absl::StrCat("skip_first=", s.skip_first, " (need >= 0)"));
  if (bad.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("invalid profiler schedule: ", absl::StrJoin(bad, ", ")));
}

ProfilerAction ScheduleAction(const ProfilerSchedule& s, int64_t step) {
  if (step < s.skip_first) return ProfilerAction::kNone;
  step -= s.skip_first;
  const int64_t cycle = s.wait + s.warmup + s.active;
  if (s.repeat > 0 && step >= s.repeat * cycle) return ProfilerAction::kNone;
  const int64_t in_cycle = step % cycle;
  if (in_cycle < s.wait) return ProfilerAction::kNone;
  if (in_cycle < s.wait + s.warmup) return ProfilerAction::kWarmup;
  return in_cycle < cycle - 1 ? ProfilerAction::kRecord : ProfilerAction::kRecordAndSave;
}

}  // namespace kd
