// The stage's teacher: its values for a batch (through the teacher cache, StageConfig.
// teacher_cache), computed a batch ahead on a thread of the stage's own (overlap_teacher), the
// set-up of both and what they report; torchdistill's get_teacher_output.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <utility>

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
#include "distill/boxes/internal/stage_impl.h"
#include "distill/boxes/internal/stage_setup.h"
#include "distill/boxes/internal/teacher_cache.h"
#include "distill/config/teacher_extras.h"

namespace kd {
namespace box_internal {

absl::StatusOr<TeacherValues> Stage::TeacherForward(const Batch& rows) {
  TeacherValues values;
  if (teacher_trains_) {
    KD_ASSIGN_OR_RETURN(values.output, (*teacher_forward_)(*teacher_, rows));
  } else {
    at::NoGradGuard no_grad;
    KD_ASSIGN_OR_RETURN(values.output, (*teacher_forward_)(*teacher_, rows));
  }
  KD_ASSIGN_OR_RETURN(values.io, teacher_hooks_.PopIoDict());
  return values;
}

absl::StatusOr<TeacherValues> Stage::TeacherValuesOf(const Batch& batch) {
  RECORD_USER_SCOPE("teacher_forward");
  auto forward = [this](const Batch& rows) { return TeacherForward(rows); };
  return teacher_cache_ != nullptr ? teacher_cache_->Run(batch, forward) : forward(batch);
}

absl::StatusOr<Batch> Stage::NextBatch(std::deque<Batch>& queue, int64_t& fetched, int64_t steps,
                                       const std::function<absl::Status(Batch&)>& fetch) {
  auto front = [&]() {
    Batch batch = std::move(queue.front());
    queue.pop_front();
    return batch;
  };
  auto fetch_one = [&]() {
    queue.emplace_back();
    ++fetched;
    return fetch(queue.back());
  };
  if (queue.empty()) KD_RETURN_IF_ERROR(fetch_one());
  if (lookahead_rows_ == 0 || !teacher_cache_->HasMisses(queue.front())) return front();
  int64_t rows = 0;
  for (const Batch& batch : queue) rows += BatchRows(batch);
  while (rows < lookahead_rows_ && fetched < steps) {
    KD_RETURN_IF_ERROR(fetch_one());
    rows += BatchRows(queue.back());
  }
  RECORD_USER_SCOPE("teacher_forward");
  std::vector<const Batch*> batches;
  for (const Batch& batch : queue) batches.push_back(&batch);
  std::optional<AutocastGuard> autocast;
  Autocast(autocast);
  absl::StatusOr<absl::Status> done = CallTorch(
      [&] {
        return teacher_cache_->Prefill(batches,
                                       [this](const Batch& rows) { return TeacherForward(rows); });
      },
      absl::StatusCode::kInternal);
  const absl::Status status = done.ok() ? *done : done.status();
  if (status.ok()) return front();
  return WithContext(absl::StrCat("stage \"", name_, "\" epoch ", epoch_ + 1, ", the teacher on ",
                                  rows, " rows of the coming batches of dataset \"",
                                  train_dataset_, "\" (teacher_cache.lookahead_rows)"),
                     status);
}

void Stage::SetUpLookahead(const StageConfig& config) {
  lookahead_rows_ = 0;
  lookahead_off_.clear();
  if (teacher_cache_ == nullptr) return;
  const TeacherCacheConfig& cache = config.teacher_cache();
  constexpr int64_t kDefaultRows = 128;  // the field's documented default
  const int64_t rows = cache.has_lookahead_rows() ? cache.lookahead_rows() : kDefaultRows;
  if (rows == 0) {
    lookahead_off_ = "lookahead_rows 0";
  } else if (overlap_teacher_) {
    lookahead_off_ = "the teacher overlaps the student's step on a thread of its own";
  } else if (!device_.is_cpu()) {
    lookahead_off_ = absl::StrCat("the teacher runs on ", device_.str());
  } else if (std::string pre_forward = PreForwardObstacle(config); !pre_forward.empty()) {
    lookahead_off_ = pre_forward;
  } else {
    lookahead_rows_ = rows;
  }
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

std::future<absl::StatusOr<TeacherValues>> Stage::LaunchTeacher(const Batch& batch) {
  at::ThreadLocalState state;  // grad mode, dispatch keys, profiler: the caller's
  return teacher_thread_->Submit([this, &batch, state]() {
    at::ThreadLocalStateGuard guard(state);
    std::optional<AutocastGuard> autocast;
    Autocast(autocast);
    absl::StatusOr<absl::StatusOr<TeacherValues>> values =
        CallTorch([&] { return TeacherValuesOf(batch); }, absl::StatusCode::kInternal);
    return values.ok() ? *std::move(values) : absl::StatusOr<TeacherValues>(values.status());
  });
}

absl::StatusOr<c10::IValue> Stage::RunTeacher(const Batch& batch) {
  TeacherValues values;
  if (ready_teacher_.has_value()) {  // computed ahead (overlap_teacher)
    values = *std::move(ready_teacher_);
    ready_teacher_.reset();
  } else {
    KD_ASSIGN_OR_RETURN(values, TeacherValuesOf(batch));
  }
  teacher_io_ = std::move(values.io);
  // The teacher's auxiliary modules run on its values, from the cache or not: they may train.
  KD_RETURN_IF_ERROR(
      RunAuxiliaryModules(ModelRole::kTeacher, student_->is_training(), aux_, teacher_io_));
  return values.output;
}

absl::Status Stage::SetUpTeacherCache(const StageConfig& config, const std::string& run_dir) {
  teacher_cache_.reset();
  teacher_cache_off_.clear();
  if (teacher_ == nullptr) return absl::OkStatus();
  const TeacherCacheConfig& cache = config.teacher_cache();
  if (cache.mode() == TeacherCacheConfig::OFF) {
    teacher_cache_off_ = "teacher_cache mode OFF";
    return absl::OkStatus();
  }
  const int64_t transforms = train_loader_->dataset().NumTransforms();
  // What the config shows (the validator's rule), then what the built stage knows.
  std::string obstacle = TeacherCacheObstacle(config, /*has_teacher=*/true, nullptr);
  if (obstacle.empty() && cache.mode() == TeacherCacheConfig::AUTO && !device_.is_cpu()) {
    obstacle = "AUTO keeps it to CPU teachers (give mode ON to cache on " + device_.str() + ")";
  }
  if (obstacle.empty() && transforms <= 0) {
    obstacle = absl::StrCat("the training dataset \"", train_dataset_,
                            "\" does not report its random transforms (Dataset::NumTransforms), "
                            "so a sample's input is not known from its index");
  }
  if (!obstacle.empty()) {
    if (cache.mode() == TeacherCacheConfig::ON) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mode ON, but the cache cannot be exact: ", obstacle, "; set mode AUTO or OFF"));
    }
    teacher_cache_off_ = obstacle;
    return absl::OkStatus();
  }
  int64_t memory = cache.memory_mib() * (int64_t{1} << 20);
  if (memory == 0) {
    memory = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) / 4;
  }
  const std::string dir =
      run_dir.empty() ? std::filesystem::temp_directory_path().string() : run_dir;
  teacher_cache_ = std::make_unique<TeacherCache>(TeacherCache::Options{
      .num_transforms = transforms,
      .memory_bytes = memory,
      .spill_path = (std::filesystem::path(dir) /
                     absl::StrCat("teacher_cache.", name_.empty() ? "stage" : name_,
                                  // each rank of a multi-process run spills to a file of its own
                                  distributed() ? absl::StrCat(".rank", rank()) : "",
                                  // in the shared temporary folder, a name of this process's
                                  run_dir.empty() ? absl::StrCat(".pid", getpid()) : "", ".bin"))
                        .string(),
      .disk_bytes = cache.disk_mib() * (int64_t{1} << 20),
      .required = cache.mode() == TeacherCacheConfig::ON});
  return absl::OkStatus();
}

absl::Status Stage::SetUpOverlap(const StageConfig& config) {
  overlap_teacher_ = false;
  overlap_off_.clear();
  if (teacher_ == nullptr) return absl::OkStatus();
  const TeacherCacheConfig::Mode mode = config.overlap_teacher();
  if (mode == TeacherCacheConfig::OFF) {
    overlap_off_ = "overlap_teacher OFF";
    return absl::OkStatus();
  }
  std::string obstacle = TeacherOverlapObstacle(config, /*has_teacher=*/true);
  if (obstacle.empty() && !device_.is_cpu()) {
    obstacle = absl::StrCat("the teacher runs on ", device_.str(),
                            " (a CUDA stream of its own is not built yet)");
  }
  if (!obstacle.empty() && mode == TeacherCacheConfig::ON) {
    return absl::InvalidArgumentError(
        absl::StrCat("mode ON, but the overlap would not give the sequential run: ", obstacle,
                     "; set mode AUTO or OFF"));
  }
  const int threads = at::get_num_threads();
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (obstacle.empty() && mode == TeacherCacheConfig::AUTO && 2 * threads > cores) {
    obstacle = absl::StrCat("no idle core: ", threads, " intra-op thread(s) on ", cores,
                            " core(s), and the teacher's thread would take as many (give "
                            "fewer threads, or mode ON)");
  }
  overlap_teacher_ = obstacle.empty();
  overlap_off_ = obstacle;
  if (overlap_teacher_ && teacher_thread_ == nullptr)
    teacher_thread_ = std::make_unique<TaskThread>();
  return absl::OkStatus();
}

std::optional<TeacherCacheReport> Stage::TakeTeacherCacheReport() {
  if (teacher_ == nullptr) return std::nullopt;
  TeacherCacheReport report;
  if (teacher_cache_ != nullptr) {
    report = teacher_cache_->TakeStats();
  } else {
    report.off_reason = teacher_cache_off_;
  }
  if (report.lookahead_off_reason.empty()) report.lookahead_off_reason = lookahead_off_;
  if (report.lookahead_off_reason.empty()) report.lookahead_rows = lookahead_rows_;
  report.overlapped = overlap_teacher_;
  report.overlap_off_reason = overlap_off_;
  return report;
}

absl::StatusOr<c10::IValue> Stage::TeacherOutput(Batch& batch) {
  if (teacher_ == nullptr) {
    return absl::FailedPreconditionError("TeacherOutput: the box has no teacher");
  }
  if (teacher_trains_ && ddp_ != nullptr) {
    return absl::FailedPreconditionError(
        "TeacherOutput: a teacher that trains in a multi-process run forwards only with the "
        "student (Forward), whose backward its gradient reduction awaits");
  }
  ToDevice(batch);
  std::optional<AutocastGuard> autocast;
  Autocast(autocast);
  teacher_io_ = IoDict();
  absl::StatusOr<absl::StatusOr<c10::IValue>> output =
      CallTorch([&] { return RunTeacher(batch); }, absl::StatusCode::kInternal);
  if (!output.ok()) return WithContext(absl::StrCat("stage \"", name_, "\" teacher"), output.status());
  return *std::move(output);
}

}  // namespace box_internal
}  // namespace kd
