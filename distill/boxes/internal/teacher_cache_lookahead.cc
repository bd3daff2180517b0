// TeacherCache's look-ahead: the misses of several batches computed in one teacher call.
#include <algorithm>
#include <cstring>
#include <unordered_set>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "distill/boxes/internal/batch_rows.h"
#include "distill/boxes/internal/teacher_cache.h"

namespace kd {
namespace boxes_internal {

bool TeacherCache::HasMisses(const Batch& batch) const {
  const int64_t rows = BatchRows(batch);
  if (!enabled() || rows < 2) return false;
  const absl::StatusOr<std::vector<int64_t>> keys = Keys(batch, rows);
  return keys.ok() && std::any_of(keys->begin(), keys->end(),
                                  [&](int64_t key) { return slots_.count(key) == 0; });
}

absl::Status TeacherCache::Prefill(const std::vector<const Batch*>& batches,
                                   const Forward& forward) {
  if (!enabled() || !lookahead_off_reason_.empty() || batches.empty()) return absl::OkStatus();
  // Every row of the batches: the first batch's first, each key once; the misses to run, and
  // up to kCheckRows hits.
  std::vector<int64_t> all_keys, misses, hits, hit_slots;
  std::unordered_set<int64_t> seen;
  for (const Batch* batch : batches) {
    const int64_t rows = BatchRows(*batch);
    absl::StatusOr<std::vector<int64_t>> keys = Keys(*batch, rows);
    if (rows < 2 || !keys.ok()) return absl::OkStatus();  // Run takes them as they are
    for (int64_t key : *keys) {
      const auto row = static_cast<int64_t>(all_keys.size());
      all_keys.push_back(key);
      if (const auto it = slots_.find(key); it != slots_.end()) {
        hits.push_back(row);
        hit_slots.push_back(it->second);
      } else if (seen.insert(key).second) {
        misses.push_back(row);
      }
    }
  }
  if (misses.empty()) return absl::OkStatus();
  std::vector<int64_t> run_rows = misses, check_slots;
  const size_t checks = std::min<size_t>(hits.size(), kCheckRows);
  for (size_t i = 0; i < checks; ++i) {
    run_rows.push_back(hits[i * hits.size() / checks]);
    check_slots.push_back(hit_slots[i * hits.size() / checks]);
  }
  const auto n = static_cast<int64_t>(run_rows.size());
  if (n < 2) return absl::OkStatus();

  // The first time: the first batch alone, as a run without the look-ahead computes it.
  std::vector<at::Tensor> alone;
  if (!lookahead_checked_) {
    const int64_t rows = BatchRows(*batches[0]);
    KD_ASSIGN_OR_RETURN(TeacherValues values, Timed(forward, *batches[0], rows));
    if (fields_.empty()) {
      if (absl::Status laid = Layout(values, rows); !laid.ok()) return Refuse(laid);
    }
    absl::StatusOr<std::vector<at::Tensor>> flat = Flatten(values, rows);
    if (!flat.ok()) return Refuse(flat.status());
    alone = *std::move(flat);
  }
  KD_ASSIGN_OR_RETURN(
      TeacherValues values,
      Timed(forward, SelectRows(ConcatRows(batches), at::tensor(run_rows, at::kLong)), n));
  absl::StatusOr<std::vector<at::Tensor>> flat = Flatten(values, n);
  if (!flat.ok()) return Refuse(flat.status());
  const std::vector<at::Tensor> fresh = *std::move(flat);
  KD_ASSIGN_OR_RETURN(const bool same,
                      Matches(fresh, static_cast<int64_t>(misses.size()), check_slots, n));
  if (!same) return absl::OkStatus();
  if (!lookahead_checked_) {
    lookahead_checked_ = true;
    // The first batch's rows run by the look-ahead against the batch alone.
    for (size_t j = 0; j < misses.size() && misses[j] < BatchRows(*batches[0]); ++j) {
      for (size_t i = 0; i < fields_.size(); ++i) {
        const int64_t bytes = fields_[i].row_bytes;
        if (std::memcmp(static_cast<const char*>(fresh[i].data_ptr()) + j * bytes,
                        static_cast<const char*>(alone[i].data_ptr()) + misses[j] * bytes,
                        static_cast<size_t>(bytes)) != 0) {
          lookahead_off_reason_ = absl::StrFormat(
              "the teacher computed a sample differently in the look-ahead's batch of %d rows "
              "than in the step's batch of %d (%s)",
              n, BatchRows(*batches[0]), fields_[i].path.empty() ? "its output" : fields_[i].path);
          return absl::OkStatus();
        }
      }
    }
  }
  // Every row run (the checks included) is counted as run, not as a hit when served.
  for (size_t j = 0; j < misses.size(); ++j) Store(all_keys[misses[j]], fresh, j);
  for (int64_t row : run_rows) unserved_.insert(all_keys[row]);
  return absl::OkStatus();
}

}  // namespace boxes_internal
}  // namespace kd
