// The stage's teacher: one object the stage's per-batch loop asks, once a step, for the step's
// batch, and the forward asks for the teacher's values of it. Behind that interface the three
// ways the teacher can run, each set up from the stage's config (on, off with the reason, or
// refused for mode ON) and reported at the epoch's end:
//
//   - the exact teacher cache (StageConfig.teacher_cache): rows seen before read back;
//   - the look-ahead (teacher_cache.lookahead_rows): on a batch with unseen rows, the coming
//     batches fetched and the teacher run once on all their unseen rows;
//   - the overlap (StageConfig.overlap_teacher): the next batch's values computed on a thread
//     of their own while the student steps on this one.
//
//   StageTeacher::Epoch batches(teacher, epoch, steps, fetch);
//   for (int64_t step = 0; step < steps; ++step) {
//     KD_ASSIGN_OR_RETURN(Batch batch, batches.Next());
//     ... teacher.ValuesFor(batch) in the forward ...
//   }
//
// torchdistill's get_teacher_output, with the cache it does not have.
#ifndef LIBKD_DISTILL_BOXES_INTERNAL_STAGE_TEACHER_H_
#define LIBKD_DISTILL_BOXES_INTERNAL_STAGE_TEACHER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "distill/boxes/box_options.h"
#include "distill/boxes/internal/teacher_cache.h"
#include "distill/config/distill_config.pb.h"
#include "distill/data/batch.h"
#include "distill/procs/proc_func.h"
#include "hooks/forward_hook_manager.h"
#include "hooks/model.h"

namespace kd {
namespace boxes_internal {

// One thread running tasks in order: the teacher's thread of overlap_teacher. Its ATen and
// OpenMP thread settings are made once, as the run's (at::init_num_threads), not per batch.
class TaskThread {
 public:
  TaskThread();
  ~TaskThread();  // runs what was submitted, then joins
  TaskThread(const TaskThread&) = delete;
  TaskThread& operator=(const TaskThread&) = delete;

  template <typename F>
  auto Submit(F f) -> std::future<decltype(f())> {
    auto task = std::make_shared<std::packaged_task<decltype(f())()>>(std::move(f));
    auto result = task->get_future();
    Push([task] { (*task)(); });
    return result;
  }

 private:
  void Push(std::function<void()> task);
  void Loop();

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  bool done_ = false;
  std::thread thread_;  // last: started once the rest is built
};

class StageTeacher {
 public:
  // The teacher as its stage runs it.
  struct Parts {
    Model* model = nullptr;  // null: a stage without a teacher (every setting off)
    ForwardHookManager* hooks = nullptr;
    std::optional<ProcFunc<ForwardProc>> forward;
    bool trains = false;  // forward with gradients; never cached
    c10::Device device = c10::Device(c10::kCPU);
    std::optional<at::ScalarType> autocast_dtype;  // run.precision BF16 / FP16
  };
  // Where it runs, for its messages and the cache's spill file.
  struct Place {
    std::string stage;          // the stage's name
    std::string train_dataset;  // the training loader's dataset id
    int64_t num_transforms = 0;  // the training dataset's (Dataset::NumTransforms)
    std::string run_dir;         // the spill file's folder ("" : the temporary folder)
    bool distributed = false;
    int64_t rank = 0;
  };

  StageTeacher() = default;
  StageTeacher(const StageTeacher&) = delete;
  StageTeacher& operator=(const StageTeacher&) = delete;

  // Sets up the cache, the overlap and the look-ahead of `config` for `parts` (what a previous
  // stage set up goes). Errors (a mode ON that cannot be honoured) name the field.
  absl::Status Configure(const StageConfig& config, Parts parts, Place place);

  // The teacher's values for `batch`: the ones computed ahead for it (overlap), else through
  // the cache (if on), else its forward (no grad unless it trains) and its hooks' I/O dict.
  absl::StatusOr<TeacherValues> ValuesFor(const Batch& batch);

  // What the epoch's end reports of it (nullopt without a teacher); the cache's counts restart.
  std::optional<TeacherCacheReport> TakeReport();

  // The batches of one epoch, each fetched by `fetch` (the loader's next batch, moved to the
  // device by the pre-forward process), with the teacher run ahead where the stage's settings
  // say. Every way out of the epoch, an error included, waits for the teacher's call in flight.
  class Epoch {
   public:
    using Fetch = std::function<absl::Status(Batch&)>;
    Epoch(StageTeacher& teacher, int64_t epoch, int64_t steps, Fetch fetch)
        : teacher_(teacher), epoch_(epoch), steps_(steps), fetch_(std::move(fetch)) {}
    ~Epoch() {
      if (ahead_.valid()) ahead_.wait();
    }
    Epoch(const Epoch&) = delete;
    Epoch& operator=(const Epoch&) = delete;

    // The next step's batch (at most `steps` calls).
    absl::StatusOr<Batch> Next();

   private:
    absl::Status FetchOne();
    absl::Status LookAhead();
    absl::StatusOr<Batch> NextOverlapped();

    StageTeacher& teacher_;
    const int64_t epoch_, steps_;
    const Fetch fetch_;
    int64_t step_ = 0, fetched_ = 0;
    std::deque<Batch> queue_;  // fetched, not yet taken (the look-ahead's)
    // overlap_teacher: the next batch and its teacher values, computed on the teacher's thread.
    Batch upcoming_;
    std::future<absl::StatusOr<TeacherValues>> ahead_;
  };

 private:
  absl::Status SetUpCache(const StageConfig& config);
  absl::Status SetUpOverlap(const StageConfig& config);
  void SetUpLookahead(const StageConfig& config);  // after the two above
  // The forward on `rows` and its hooks' I/O dict.
  absl::StatusOr<TeacherValues> Forward(const Batch& rows);
  // Through the cache, if on.
  absl::StatusOr<TeacherValues> Compute(const Batch& batch);
  // Compute(batch) on the teacher's thread with this thread's grad mode, autocast and profiler
  // state; `batch` must outlive the result.
  std::future<absl::StatusOr<TeacherValues>> Launch(const Batch& batch);
  // The teacher once on the unseen rows of `batches` (the look-ahead).
  absl::Status Prefill(const std::deque<Batch>& batches);
  // "stage \"s\" epoch 2" and the rest of a message's place.
  std::string Where(int64_t epoch) const;

  Parts parts_;
  Place place_;
  std::unique_ptr<TeacherCache> cache_;  // null: off, for cache_off_
  std::string cache_off_;
  bool overlap_ = false;
  std::string overlap_off_;
  int64_t lookahead_rows_ = 0;  // 0: off, for lookahead_off_
  std::string lookahead_off_;
  // overlap_teacher: the values computed ahead for the batch ValuesFor is asked for next.
  std::optional<TeacherValues> ready_;
  // overlap_teacher's thread, kept across stages; last, so that it is joined before what its
  // tasks use goes.
  std::unique_ptr<TaskThread> thread_;
};

}  // namespace boxes_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_INTERNAL_STAGE_TEACHER_H_
