// The stage's teacher (stage_teacher.h): its settings' set-up, the epoch's batches with the
// look-ahead or the overlap, and the teacher's values through the cache.
#include "distill/boxes/internal/stage_teacher.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "distill/boxes/amp.h"
#include "distill/boxes/internal/batch_rows.h"
#include "distill/boxes/internal/teacher_cache.h"
#include "distill/config/teacher_extras.h"

namespace kd {
namespace boxes_internal {
namespace {

// Autocast in `guard` for `dtype` on `device` (nothing for FP32).
void Autocast(const StageTeacher::Parts& parts, std::optional<AutocastGuard>& guard) {
  if (parts.autocast_dtype.has_value()) guard.emplace(parts.device.type(), *parts.autocast_dtype);
}

}  // namespace

absl::Status StageTeacher::Configure(const StageConfig& config, Parts parts, Place place) {
  parts_ = std::move(parts);
  place_ = std::move(place);
  ready_.reset();
  KD_RETURN_IF_ERROR(WithContext("teacher_cache", SetUpCache(config)));
  KD_RETURN_IF_ERROR(WithContext("overlap_teacher", SetUpOverlap(config)));
  SetUpLookahead(config);
  return absl::OkStatus();
}

absl::Status StageTeacher::SetUpCache(const StageConfig& config) {
  cache_.reset();
  cache_off_.clear();
  if (parts_.model == nullptr) return absl::OkStatus();
  const TeacherCacheConfig& cache = config.teacher_cache();
  if (cache.mode() == OFF) {
    cache_off_ = "teacher_cache mode OFF";
    return absl::OkStatus();
  }
  const c10::Device device = parts_.device;
  // What the config shows (the validator's rule), then what the built stage knows.
  std::string obstacle = TeacherCacheObstacle(config, /*has_teacher=*/true, nullptr);
  if (obstacle.empty() && cache.mode() == AUTO && !device.is_cpu()) {
    obstacle = "AUTO keeps it to CPU teachers (give mode ON to cache on " + device.str() + ")";
  }
  if (obstacle.empty() && place_.num_transforms <= 0) {
    obstacle = absl::StrCat("the training dataset \"", place_.train_dataset,
                            "\" does not report its random transforms (Dataset::NumTransforms), "
                            "so a sample's input is not known from its index");
  }
  if (!obstacle.empty()) {
    if (cache.mode() == ON) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mode ON, but the cache cannot be exact: ", obstacle, "; set mode AUTO or OFF"));
    }
    cache_off_ = obstacle;
    return absl::OkStatus();
  }
  int64_t memory = cache.memory_mib() * (int64_t{1} << 20);
  if (memory == 0) {
    memory = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) / 4;
  }
  const std::string& run_dir = place_.run_dir;
  const std::string dir =
      run_dir.empty() ? std::filesystem::temp_directory_path().string() : run_dir;
  const std::string& stage = place_.stage;
  cache_ = std::make_unique<TeacherCache>(TeacherCache::Options{
      .num_transforms = place_.num_transforms,
      .memory_bytes = memory,
      .spill_path = (std::filesystem::path(dir) /
                     absl::StrCat("teacher_cache.", stage.empty() ? "stage" : stage,
                                  // each rank of a multi-process run spills to a file of its own
                                  place_.distributed ? absl::StrCat(".rank", place_.rank) : "",
                                  // in the shared temporary folder, a name of this process's
                                  run_dir.empty() ? absl::StrCat(".pid", getpid()) : "", ".bin"))
                        .string(),
      .disk_bytes = cache.disk_mib() * (int64_t{1} << 20),
      .required = cache.mode() == ON});
  return absl::OkStatus();
}

absl::Status StageTeacher::SetUpOverlap(const StageConfig& config) {
  overlap_ = false;
  overlap_off_.clear();
  if (parts_.model == nullptr) return absl::OkStatus();
  const Switch mode = config.overlap_teacher();
  if (mode == OFF) {
    overlap_off_ = "overlap_teacher OFF";
    return absl::OkStatus();
  }
  std::string obstacle = TeacherOverlapObstacle(config, /*has_teacher=*/true);
  if (obstacle.empty() && !parts_.device.is_cpu()) {
    obstacle = absl::StrCat("the teacher runs on ", parts_.device.str(),
                            " (a CUDA stream of its own is not built yet)");
  }
  if (!obstacle.empty() && mode == ON) {
    return absl::InvalidArgumentError(
        absl::StrCat("mode ON, but the overlap would not give the sequential run: ", obstacle,
                     "; set mode AUTO or OFF"));
  }
  const int threads = at::get_num_threads();
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (obstacle.empty() && mode == AUTO && 2 * threads > cores) {
    obstacle = absl::StrCat("no idle core: ", threads, " intra-op thread(s) on ", cores,
                            " core(s), and the teacher's thread would take as many (give "
                            "fewer threads, or mode ON)");
  }
  overlap_ = obstacle.empty();
  overlap_off_ = obstacle;
  if (overlap_ && thread_ == nullptr) thread_ = std::make_unique<TaskThread>();
  return absl::OkStatus();
}

void StageTeacher::SetUpLookahead(const StageConfig& config) {
  lookahead_rows_ = 0;
  lookahead_off_.clear();
  if (cache_ == nullptr) return;
  const int64_t rows = LookaheadRows(config.teacher_cache());
  if (rows == 0) {
    lookahead_off_ = "lookahead_rows 0";
  } else if (overlap_) {
    lookahead_off_ = "the teacher overlaps the student's step on a thread of its own";
  } else if (!parts_.device.is_cpu()) {
    lookahead_off_ = absl::StrCat("the teacher runs on ", parts_.device.str());
  } else if (std::string pre_forward = PreForwardObstacle(config); !pre_forward.empty()) {
    lookahead_off_ = pre_forward;
  } else {
    lookahead_rows_ = rows;
  }
}

absl::StatusOr<TeacherValues> StageTeacher::Forward(const Batch& rows) {
  TeacherValues values;
  if (parts_.trains) {
    KD_ASSIGN_OR_RETURN(values.output, (*parts_.forward)(*parts_.model, rows));
  } else {
    at::NoGradGuard no_grad;
    KD_ASSIGN_OR_RETURN(values.output, (*parts_.forward)(*parts_.model, rows));
  }
  KD_ASSIGN_OR_RETURN(values.io, parts_.hooks->PopIoDict());
  return values;
}

absl::StatusOr<TeacherValues> StageTeacher::Compute(const Batch& batch) {
  RECORD_USER_SCOPE("teacher_forward");
  auto forward = [this](const Batch& rows) { return Forward(rows); };
  return cache_ != nullptr ? cache_->Run(batch, forward) : forward(batch);
}

absl::StatusOr<TeacherValues> StageTeacher::ValuesFor(const Batch& batch) {
  if (!ready_.has_value()) return Compute(batch);
  TeacherValues values = *std::move(ready_);  // computed ahead (overlap_teacher)
  ready_.reset();
  return values;
}

std::future<absl::StatusOr<TeacherValues>> StageTeacher::Launch(const Batch& batch) {
  at::ThreadLocalState state;  // grad mode, dispatch keys, profiler: the caller's
  return thread_->Submit([this, &batch, state]() {
    at::ThreadLocalStateGuard guard(state);
    std::optional<AutocastGuard> autocast;
    Autocast(parts_, autocast);
    return CallTorchFlat([&] { return Compute(batch); });
  });
}

absl::Status StageTeacher::Prefill(const std::deque<Batch>& queue) {
  RECORD_USER_SCOPE("teacher_forward");
  std::vector<const Batch*> batches;
  for (const Batch& batch : queue) batches.push_back(&batch);
  std::optional<AutocastGuard> autocast;
  Autocast(parts_, autocast);
  return CallTorchFlat([&] {
    return cache_->Prefill(batches, [this](const Batch& rows) { return Forward(rows); });
  });
}

std::string StageTeacher::Where(int64_t epoch) const {
  return absl::StrCat("stage \"", place_.stage, "\" epoch ", epoch + 1);
}

std::optional<TeacherCacheReport> StageTeacher::TakeReport() {
  if (parts_.model == nullptr) return std::nullopt;
  TeacherCacheReport report;
  if (cache_ != nullptr) {
    report = cache_->TakeStats();
  } else {
    report.off_reason = cache_off_;
  }
  if (report.lookahead_off_reason.empty()) report.lookahead_off_reason = lookahead_off_;
  if (report.lookahead_off_reason.empty()) report.lookahead_rows = lookahead_rows_;
  report.overlapped = overlap_;
  report.overlap_off_reason = overlap_off_;
  return report;
}

absl::Status StageTeacher::Epoch::FetchOne() {
  queue_.emplace_back();
  ++fetched_;
  return fetch_(queue_.back());
}

absl::StatusOr<Batch> StageTeacher::Epoch::Next() {
  ++step_;
  if (teacher_.overlap_) return NextOverlapped();
  if (queue_.empty()) KD_RETURN_IF_ERROR(FetchOne());
  if (teacher_.lookahead_rows_ > 0 && teacher_.cache_->HasMisses(queue_.front())) {
    KD_RETURN_IF_ERROR(LookAhead());
  }
  Batch batch = std::move(queue_.front());
  queue_.pop_front();
  return batch;
}

// The step's batch has rows the cache has not seen: the queue filled with the epoch's coming
// batches up to lookahead_rows_ rows, and the teacher run once on their unseen rows.
absl::Status StageTeacher::Epoch::LookAhead() {
  int64_t rows = 0;
  for (const Batch& batch : queue_) rows += BatchRows(batch);
  while (rows < teacher_.lookahead_rows_ && fetched_ < steps_) {
    KD_RETURN_IF_ERROR(FetchOne());
    rows += BatchRows(queue_.back());
  }
  return WithContext(absl::StrCat(teacher_.Where(epoch_), ", the teacher on ", rows,
                                  " rows of the coming batches of dataset \"",
                                  teacher_.place_.train_dataset,
                                  "\" (teacher_cache.lookahead_rows)"),
                     teacher_.Prefill(queue_));
}

// One teacher call is in flight at a time (the cache and the teacher's hooks are used by one
// thread at a time); it reads upcoming_ and the teacher's state, so ~Epoch waits for it.
absl::StatusOr<Batch> StageTeacher::Epoch::NextOverlapped() {
  const int64_t step = step_ - 1;
  if (step == 0) {
    KD_RETURN_IF_ERROR(fetch_(upcoming_));
    ahead_ = teacher_.Launch(upcoming_);
  }
  absl::StatusOr<TeacherValues> values = ahead_.get();
  if (!values.ok()) {
    return WithContext(absl::StrCat(teacher_.Where(epoch_), " step ", step + 1,
                                    ", a batch of dataset \"", teacher_.place_.train_dataset,
                                    "\": teacher"),
                       values.status());
  }
  teacher_.ready_ = *std::move(values);
  Batch batch = std::move(upcoming_);
  if (step + 1 < steps_) {
    upcoming_ = Batch();
    KD_RETURN_IF_ERROR(fetch_(upcoming_));
    ahead_ = teacher_.Launch(upcoming_);
  }
  return batch;
}

TaskThread::TaskThread() : thread_([this] { Loop(); }) {}

TaskThread::~TaskThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  ready_.notify_one();
  thread_.join();
}

void TaskThread::Push(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  ready_.notify_one();
}

void TaskThread::Loop() {
  at::init_num_threads();  // the run's intra-op threads here too (OpenMP's default is a core each)
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [this] { return done_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace boxes_internal
}  // namespace kd
