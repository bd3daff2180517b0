// Scheduled profiling with libtorch's own Kineto profiler: silverspoon-kd's
// create_profiler(output_dir, wait=20, warmup=3, active=3, repeat=1, with_stack=False) in C++.
//
//   KD_ASSIGN_OR_RETURN(std::unique_ptr<kd::Profiler> profiler,
//                       kd::CreateProfiler({.output_dir = "runs/kd/profile"}));
//   for (...) {
//     { RECORD_USER_SCOPE("student_forward"); ... }  // ATen/record_function.h
//     KD_RETURN_IF_ERROR(profiler->Step());            // after each training step
//   }
//   KD_RETURN_IF_ERROR(profiler->Stop());              // or let it go out of scope
//
// Collection and the Chrome trace come from libtorch (ProfilerState::KINETO, prepareProfiler /
// enableProfiler / disableProfiler, ProfilerResult::save); libkd writes the schedule (as
// torch.profiler.schedule, profiler/schedule.h) and torch.profiler.profile's transitions between
// its actions: the profiler is prepared at the first warmup step, records from the first active
// step, and at the end of each active window writes `<output_dir>/trace_step_<N>.json`, N being
// the step count then, as silverspoon-kd's trace handler names it. CPU activity always, CUDA
// activity when a CUDA device is available; shapes and memory recorded (silverspoon-kd's
// settings). `with_stack` records, in C++, the TorchScript call stack of ops that TorchScript
// modules run (there are no Python frames); native modules' ops carry none.
#ifndef LIBKD_PROFILER_PROFILER_H_
#define LIBKD_PROFILER_PROFILER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "profiler/schedule.h"

namespace kd {

struct ProfilerOptions {
  // Where the traces go; created if missing. Required.
  std::string output_dir;
  // Also a hard link (a copy where linking fails) of each trace here, named as
  // torch.profiler.tensorboard_trace_handler names them (<host>_<pid>.<milliseconds>.pt.trace.json),
  // where TensorBoard's profiler plugin finds them: "<logdir>/plugins/profile/<run>". Empty:
  // none.
  std::string tensorboard_dir;
  ProfilerSchedule schedule;
  bool record_shapes = true;
  bool profile_memory = true;
  bool with_stack = false;
};

class Profiler {
 public:
  // Validates the options (the schedule's values, a usable output_dir), creates output_dir and
  // starts the profiler at step 0, as entering `with create_profiler(...)` does.
  static absl::StatusOr<std::unique_ptr<Profiler>> Create(const ProfilerOptions& options);
  // Stops it if Stop was not called (an error goes to stderr).
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // The next step begins (torch.profiler.profile.step()).
  absl::Status Step();
  // Leaves the profiled region (the with-block's exit): an active window is stopped and saved.
  absl::Status Stop();

  int64_t step_num() const { return step_; }
  ProfilerAction current_action() const { return action_; }
  // The traces written so far, in order.
  const std::vector<std::string>& traces() const { return traces_; }

  struct Kineto;  // libtorch's profiler calls (profiler.cc)

 private:
  explicit Profiler(const ProfilerOptions& options);
  // torch.profiler.profile's action list for the transition from `prev` to `next` (null: the
  // exit).
  absl::Status Transit(ProfilerAction prev, const ProfilerAction* next);

  ProfilerOptions options_;
  std::unique_ptr<Kineto> kineto_;
  int64_t step_ = 0;
  ProfilerAction action_ = ProfilerAction::kNone;
  bool stopped_ = false;
  std::vector<std::string> traces_;
};

// silverspoon-kd's name for Profiler::Create.
inline absl::StatusOr<std::unique_ptr<Profiler>> CreateProfiler(const ProfilerOptions& options) {
  return Profiler::Create(options);
}

}  // namespace kd

#endif  // LIBKD_PROFILER_PROFILER_H_
