// The exact teacher-output cache of a distillation stage (StageConfig.teacher_cache).
//
// A teacher that does not train maps one input tensor to the same output and hooked values
// every time. The cache keeps, per training sample, the bytes of every value the teacher
// returned for it (its output and each hooked tensor's row), keyed by the sample's dataset
// index and its transform id (Dataset::NumTransforms: which crop, which flip), and runs the
// teacher only on a batch's rows it has not seen so transformed:
//
//   TeacherCache cache({.num_transforms = 162, .memory_bytes = 1 << 30,
//                       .spill_path = "runs/x/teacher_cache.train.bin"});
//   KD_ASSIGN_OR_RETURN(TeacherValues values, cache.Run(batch, forward));
//
// Exactness. A hit returns the bytes computed when the sample was first seen, in a batch of
// another size and composition; that equals recomputing as long as the teacher's kernels
// compute each row the same whatever the batch's size (measured here: libtorch's CPU kernels do
// for batches of 2 and more, not for 1 against more). So a batch of one row is never cached or
// served (it runs as it would without the cache), the teacher never runs on fewer than two
// rows, and every batch with misses recomputes up to two of its hits beside them and compares
// the bytes: on a difference the cache turns itself off for the rest of the stage and says so
// (`TakeStats().off_reason`).
//
// Memory: rows are kept in memory up to `memory_bytes`, then appended to `spill_path` and read
// back with pread. Values are stored on the CPU and returned on the device they came from.
#ifndef LIBKD_DISTILL_BOXES_INTERNAL_TEACHER_CACHE_H_
#define LIBKD_DISTILL_BOXES_INTERNAL_TEACHER_CACHE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <ATen/core/ivalue.h>

#include "absl/status/statusor.h"
#include "distill/boxes/box_options.h"
#include "distill/data/batch.h"
#include "hooks/io_dict.h"

namespace kd {
namespace boxes_internal {

// What the teacher returned for a batch: its output and its hooks' I/O dict.
struct TeacherValues {
  c10::IValue output;
  IoDict io;
};

class TeacherCache {
 public:
  struct Options {
    // The dataset's NumTransforms() (>= 1): a row's key is index * num_transforms + transform.
    int64_t num_transforms = 1;
    // Rows beyond this many bytes go to `spill_path`.
    int64_t memory_bytes = 0;
    // The spill file: created (never through a symbolic link; a regular file left by a killed
    // run is replaced) when the first row goes to disk, removed when the cache turns off or
    // goes. It may grow to `disk_bytes` (0: no bound of its own) and never past half of the
    // disk's free space at that moment; a row past that turns the cache off. Each row's
    // CRC-32 is kept in memory and checked on every read: a row changed on disk turns the
    // cache off (an error when required), never serves other values.
    std::string spill_path;
    int64_t disk_bytes = 0;
    // teacher_cache ON: values the cache cannot hold, or a failed check, are errors. Else
    // (AUTO) the cache turns itself off and says why.
    bool required = false;
  };
  explicit TeacherCache(Options options);
  ~TeacherCache();  // removes the spill file
  TeacherCache(const TeacherCache&) = delete;
  TeacherCache& operator=(const TeacherCache&) = delete;

  // The teacher's values for `batch` (its supp "indices", and "transform" unless
  // num_transforms is 1): rows in the cache read from it, the others computed by `forward` on
  // a batch of those rows (samples, targets and supp tensors selected by row) and stored.
  // Errors: what `forward` returns; InvalidArgument for values the cache cannot hold (a
  // hooked value that is not a tensor with the batch's rows in dimension 0), naming it.
  // Cached rows recomputed beside a batch's misses, their bytes compared.
  static constexpr int kCheckRows = 2;

  using Forward = std::function<absl::StatusOr<TeacherValues>(const Batch& batch)>;
  absl::StatusOr<TeacherValues> Run(const Batch& batch, const Forward& forward);

  // The look-ahead (TeacherCacheConfig.lookahead_rows): whether `batch` has rows the cache has
  // not seen, and the teacher run once on the unseen rows of several batches (the step's and
  // the ones after it, each key once, up to kCheckRows cached rows recomputed beside them), the
  // rows stored, so that Run serves those batches whole. A teacher's time per row falls with
  // its batch's size: at batch 4 a flipped Fashion-MNIST epoch's misses cost several times
  // what they cost in batches of 128. The first call also runs its first batch alone and
  // compares the bytes of its rows: on a difference (kernels that compute a row differently in
  // a larger batch) it stores nothing and the look-ahead turns itself off
  // (`TakeStats().lookahead_off_reason`). Batches without keys, of one row, or a cache that is
  // off: nothing done (Run runs them as it would).
  bool HasMisses(const Batch& batch) const;
  absl::Status Prefill(const std::vector<const Batch*>& batches, const Forward& forward);

  // What the cache did since the last call (`on`, `off_reason`, `hits`, `misses`, the bytes it
  // holds, `teacher_seconds`, `saved_seconds`: the hits times the teacher's mean time per row);
  // the overlap's fields are the stage's.
  TeacherCacheReport TakeStats();
  bool enabled() const { return disabled_reason_.empty(); }

 private:
  // A cached value: its place in TeacherValues and its row's shape and dtype.
  struct Field {
    std::string path;  // "" for the output
    std::string io;    // "input" / "output" for hooked values
    std::string key;   // of the output's dict ({"logits": ..., ...}); "" for a tensor output
    std::vector<int64_t> row_shape;
    c10::ScalarType dtype;
    int64_t row_bytes = 0;
    int64_t offset = 0;  // within a stored row
  };

  absl::StatusOr<TeacherValues> Timed(const Forward& forward, const Batch& batch, int64_t rows);
  // The batch's keys (index * num_transforms + transform), or NotFound without them.
  absl::StatusOr<std::vector<int64_t>> Keys(const Batch& batch, int64_t rows) const;
  // Values the cache cannot hold: `why` when it is required, else it turns itself off.
  absl::Status Refuse(const absl::Status& why);
  // Whether the fresh rows `fresh[j]` for j >= first equal the cached ones at `slots[j]`; on a
  // difference the cache turns itself off (an error when required).
  absl::StatusOr<bool> Matches(const std::vector<at::Tensor>& fresh, int64_t first,
                               const std::vector<int64_t>& slots, int64_t rows);
  absl::Status Layout(const TeacherValues& values, int64_t rows);
  absl::StatusOr<std::vector<at::Tensor>> Flatten(const TeacherValues& values, int64_t rows) const;
  TeacherValues Unflatten(std::vector<at::Tensor> fields) const;
  void Store(int64_t key, const std::vector<at::Tensor>& fields, int64_t row);
  // The row at `slot` into `out`. A spilled row that cannot be read or fails its CRC-32 turns
  // the cache off: DataLoss when it is required, else Cancelled (recompute the batch).
  absl::Status Load(int64_t slot, char* out);
  // Turns the cache off for the rest of the stage, saying why, and removes the spill file.
  void Disable(std::string reason);
  // With `required`, an error once the cache has turned off (a spill it could not write).
  absl::Status StillRequired() const;
  absl::Status OpenSpill();
  void RemoveSpill();

  Options options_;
  std::vector<Field> fields_;
  int64_t row_bytes_ = 0;
  int64_t memory_rows_ = 0;   // the most rows memory holds
  std::vector<char> memory_;  // rows in memory, slot-major
  int spill_fd_ = -1;
  int64_t spill_budget_ = 0;         // bytes, fixed when the spill file is made
  std::vector<uint32_t> spill_crc_;  // per row on disk
  std::unordered_map<int64_t, int64_t> slots_;  // key -> slot (>= memory_rows_: on disk)
  std::unordered_set<int64_t> unserved_;        // stored by Prefill, not yet served: not hits
  bool lookahead_checked_ = false;
  std::string lookahead_off_reason_;
  TeacherCacheReport stats_;  // counts since TakeStats; bytes since the start
  int64_t total_rows_ = 0;    // rows the teacher ran on, and its time, over the stage
  double total_seconds_ = 0;
  std::string disabled_reason_;
};

}  // namespace boxes_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_INTERNAL_TEACHER_CACHE_H_
