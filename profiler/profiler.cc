#include "profiler/profiler.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <set>
#include <string_view>
#include <system_error>
#include <utility>

#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "base/torch_status.h"

namespace kd {

namespace kineto = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

struct Profiler::Kineto {
  ProfilerConfig config;
  std::set<ActivityType> activities;
  std::unique_ptr<kineto::ProfilerResult> result;  // of the last stopped window
  bool enabled = false;
  // "ProfilerStep#N" around each step, as torch.profiler.profile records it (trace analysers
  // such as HolisticTraceAnalysis find the steps by it).
  std::string step_name;
  std::unique_ptr<at::RecordFunction> step_scope;

  void BeginStep(int64_t step) {
    step_name = absl::StrCat("ProfilerStep#", step);
    step_scope = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
    if (step_scope->isActive()) step_scope->before(std::string_view(step_name));
  }
  void EndStep() { step_scope.reset(); }
};

Profiler::Profiler(const ProfilerOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<Profiler>> Profiler::Create(const ProfilerOptions& options) {
  KD_RETURN_IF_ERROR(ValidateSchedule(options.schedule));
  if (options.output_dir.empty()) {
    return absl::InvalidArgumentError("profiler: output_dir is required (where traces go)");
  }
  // Nothing is made in /dev, /proc or /sys; a link in the folder's place is not followed.
  if (absl::Status outside = CheckNotInSystemFolder(options.output_dir); !outside.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("profiler: ", outside.message()));
  }
  std::error_code error;
  std::filesystem::create_directories(options.output_dir, error);
  if (error || !std::filesystem::is_directory(options.output_dir)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "profiler: cannot create the trace directory ", options.output_dir, ": ",
        error ? error.message() : "it is not a directory", "; pass a writable directory"));
  }
  // Writable? A probe file of this process's own (permission bits say nothing to root), made
  // new: never through a link or into a FIFO someone left there.
  const std::string probe = (std::filesystem::path(options.output_dir) /
                             absl::StrCat(".libkd_probe.", ::getpid()))
                                .string();
  const int fd = ::open(probe.c_str(),
                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat("profiler: cannot write in ",
                                                      options.output_dir, " (",
                                                      std::strerror(errno),
                                                      "); pass a writable directory"));
  }
  ::close(fd);
  ::unlink(probe.c_str());
  std::unique_ptr<Profiler> profiler(new Profiler(options));
  profiler->kineto_ = std::make_unique<Kineto>(Kineto{
      .config = ProfilerConfig(ProfilerState::KINETO, options.record_shapes, options.profile_memory,
                               options.with_stack),
      .activities = {ActivityType::CPU},
  });
  if (torch::cuda::is_available()) profiler->kineto_->activities.insert(ActivityType::CUDA);
  profiler->action_ = ScheduleAction(options.schedule, 0);
  KD_RETURN_IF_ERROR(profiler->Transit(ProfilerAction::kNone, &profiler->action_));
  profiler->kineto_->BeginStep(0);
  return profiler;
}

Profiler::~Profiler() {
  if (stopped_) return;
  if (absl::Status s = Stop(); !s.ok()) std::cerr << "profiler: " << s.message() << std::endl;
}

absl::Status Profiler::Step() {
  if (stopped_) return absl::FailedPreconditionError("profiler: Step() after Stop()");
  kineto_->EndStep();
  const ProfilerAction prev = action_;
  ++step_;
  action_ = ScheduleAction(options_.schedule, step_);
  KD_RETURN_IF_ERROR(Transit(prev, &action_));
  kineto_->BeginStep(step_);
  return absl::OkStatus();
}

absl::Status Profiler::Stop() {
  if (stopped_) return absl::OkStatus();
  stopped_ = true;
  kineto_->EndStep();
  return Transit(action_, nullptr);
}

absl::Status Profiler::Transit(ProfilerAction prev, const ProfilerAction* next) {
  Kineto& k = *kineto_;
  auto prepare = [&] {
    return CallTorch([&] { kineto::prepareProfiler(k.config, k.activities); });
  };
  auto start = [&] {
    KD_RETURN_IF_ERROR(CallTorch([&] { kineto::enableProfiler(k.config, k.activities); }));
    k.enabled = true;
    return absl::OkStatus();
  };
  auto stop = [&]() -> absl::Status {
    if (!k.enabled) return absl::OkStatus();
    k.enabled = false;
    KD_ASSIGN_OR_RETURN(k.result, CallTorch([] { return kineto::disableProfiler(); }));
    return absl::OkStatus();
  };
  auto ready = [&]() -> absl::Status {
    if (k.result == nullptr) return absl::OkStatus();
    const std::string path =
        (std::filesystem::path(options_.output_dir) / absl::StrCat("trace_step_", step_, ".json"))
            .string();
    // Written in a side folder and renamed, so a reader never sees half a trace.
    const std::filesystem::path side = std::filesystem::path(options_.output_dir) / ".writing";
    std::error_code error;
    // libtorch's save opens the file as it is: never through a symbolic link planted as the
    // side folder or the partial file (a leftover of a killed run is removed first).
    if (std::filesystem::is_symlink(std::filesystem::symlink_status(side, error))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "profiler: ", side.string(), " is a symbolic link; libkd does not write through it: "
          "remove it"));
    }
    std::filesystem::create_directories(side, error);
    const std::string partial = (side / std::filesystem::path(path).filename()).string();
    std::filesystem::remove(partial, error);  // a link is removed, not followed
    KD_RETURN_IF_ERROR(CallTorch([&] { k.result->save(partial); }));
    std::filesystem::rename(partial, path, error);
    if (error) {
      return absl::InternalError(
          absl::StrCat("profiler: cannot write ", path, ": ", error.message()));
    }
    std::filesystem::remove(side, error);  // when empty
    k.result.reset();
    traces_.push_back(path);
    if (!options_.tensorboard_dir.empty()) {
      char host[256] = "localhost";
      gethostname(host, sizeof(host) - 1);
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
      const std::filesystem::path link =
          std::filesystem::path(options_.tensorboard_dir) /
          absl::StrCat(host, "_", getpid(), ".", ms, ".pt.trace.json");
      std::filesystem::create_directories(options_.tensorboard_dir, error);
      std::filesystem::create_hard_link(path, link, error);
      if (error) std::filesystem::copy_file(path, link, error);
      if (error) {
        return absl::InternalError(absl::StrCat("profiler: cannot write ", link.string(),
                                                " for TensorBoard: ", error.message()));
      }
    }
    return absl::OkStatus();
  };
  using A = ProfilerAction;
  if (next == nullptr) {  // the exit
    if (prev == A::kWarmup) {
      KD_RETURN_IF_ERROR(start());
      return stop();
    }
    if (prev == A::kRecord || prev == A::kRecordAndSave) {
      KD_RETURN_IF_ERROR(stop());
      return ready();
    }
    return absl::OkStatus();
  }
  const A to = *next;
  switch (prev) {
    case A::kNone:
      if (to == A::kWarmup) return prepare();
      if (to == A::kRecord || to == A::kRecordAndSave) {
        KD_RETURN_IF_ERROR(prepare());
        return start();
      }
      return absl::OkStatus();
    case A::kWarmup:
      if (to == A::kNone) {  // Python warns: an incorrect schedule
        KD_RETURN_IF_ERROR(start());
        return stop();
      }
      if (to == A::kRecord || to == A::kRecordAndSave) return start();
      return absl::OkStatus();
    case A::kRecord:
      if (to == A::kNone || to == A::kWarmup) return stop();  // Python warns likewise
      return absl::OkStatus();
    case A::kRecordAndSave:
      KD_RETURN_IF_ERROR(stop());
      KD_RETURN_IF_ERROR(ready());
      if (to == A::kWarmup) return prepare();
      if (to == A::kRecord || to == A::kRecordAndSave) {
        KD_RETURN_IF_ERROR(prepare());
        return start();
      }
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

}  // namespace kd
