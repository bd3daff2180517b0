// silverspoon-kd's MemoryLeakDetectionCallback for an evaluation loop, in C++:
// memory stats per batch, an inventory diff between two batches with the owners
// of what leaked, and an allocation-history snapshot around one batch.
//
//   KD_ASSIGN_OR_RETURN(auto leaks, kd::MemoryLeakDetectionCallback::Create(
//       {.diff_between_batches = std::pair(5, 15)}, &roots, &std::cerr));
//   for (batch : eval) { leaks->OnPredictionStep(); ... }  // at the start of each batch
//   leaks->OnEvaluate();                                   // after the loop
//
// Same options, defaults and batch numbering (from 1) as the Python callback;
// inventories are taken at the start of the named batches, so the diff holds
// what persisted between them. The boxes call it from their evaluation loop
// when EvaluationConfig.memory_leak_detection is set. Create installs the
// tracking allocator, which must see the allocations to name their scope.
#ifndef LIBKD_MEMDIAG_LEAK_DETECTION_H_
#define LIBKD_MEMDIAG_LEAK_DETECTION_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>

#include <c10/core/Device.h>

#include "absl/status/statusor.h"
#include "memdiag/inventory.h"
#include "memdiag/memory_history.h"

namespace kd {

struct MemoryLeakDetectionOptions {
  // (first, second) eval batches (first < second) between which live tensors
  // are diffed.
  std::optional<std::pair<int64_t, int64_t>> diff_between_batches;
  // The batch at which the allocation history (recorded from 5 batches earlier)
  // is written to `snapshot_path` (required with it).
  std::optional<int64_t> snapshot_at_batch;
  std::string snapshot_path;
  // Memory stats every N batches (0: every batch), and always for the first N.
  int64_t log_every_n_batches = 0;
  int64_t log_first_n_batches = 10;
  // Diff rows logged at most (0: all).
  int max_diff_buckets = 30;
  // Where the evaluation runs: its memory stats and history are that device's (CUDA ones need
  // //memdiag:cuda_memory linked).
  c10::Device device = c10::Device(c10::kCPU);
};

class MemoryLeakDetectionCallback {
 public:
  // InvalidArgument for silverspoon-kd's ValueErrors (no snapshot_path; first
  // >= second). `roots` (may be null: unowned storages only) and `log` must
  // outlive the callback.
  static absl::StatusOr<std::unique_ptr<MemoryLeakDetectionCallback>> Create(
      const MemoryLeakDetectionOptions& options, const MemoryRoots* roots, std::ostream* log);

  // At the start of each evaluation batch.
  void OnPredictionStep();
  // After the evaluation loop: the batch count and inventories start afresh.
  void OnEvaluate();

  // The diffs of the last completed window (empty before one completes).
  const std::optional<TensorDiff>& last_tensor_diff() const { return tensor_diff_; }
  const std::optional<StorageDiff>& last_storage_diff() const { return storage_diff_; }

 private:
  MemoryLeakDetectionCallback(const MemoryLeakDetectionOptions& options, const MemoryRoots* roots,
                              std::ostream* log);
  void MaybeStartHistory();
  void MaybeDumpSnapshot();
  void MaybeDiff();
  void DescribeLeakedOwners(const StorageInventory& after);

  MemoryLeakDetectionOptions options_;
  MemoryRoots empty_roots_;
  const MemoryRoots* roots_;
  std::ostream* log_;
  int64_t batch_ = 0;
  std::optional<TensorInventory> tensors_before_;
  std::optional<StorageInventory> storages_before_;
  std::unique_ptr<RecordMemoryHistory> history_;
  std::optional<TensorDiff> tensor_diff_;
  std::optional<StorageDiff> storage_diff_;
};

}  // namespace kd

#endif  // LIBKD_MEMDIAG_LEAK_DETECTION_H_
