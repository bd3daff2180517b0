#include "memdiag/leak_detection.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "memdiag/tracking_allocator.h"

namespace kd {

absl::StatusOr<std::unique_ptr<MemoryLeakDetectionCallback>> MemoryLeakDetectionCallback::Create(
    const MemoryLeakDetectionOptions& options, const MemoryRoots* roots, std::ostream* log) {
  if (options.snapshot_at_batch.has_value() && options.snapshot_path.empty()) {
    return absl::InvalidArgumentError("snapshot_path is required when snapshot_at_batch is set");
  }
  if (options.diff_between_batches.has_value() &&
      options.diff_between_batches->first >= options.diff_between_batches->second) {
    return absl::InvalidArgumentError(absl::StrCat(
        "diff_between_batches must be (first, second) with first "
        "< second, got (",
        options.diff_between_batches->first, ", ", options.diff_between_batches->second, ")"));
  }
  TrackingAllocator::Install();
  return std::unique_ptr<MemoryLeakDetectionCallback>(
      new MemoryLeakDetectionCallback(options, roots, log));
}

MemoryLeakDetectionCallback::MemoryLeakDetectionCallback(const MemoryLeakDetectionOptions& options,
                                                         const MemoryRoots* roots,
                                                         std::ostream* log)
    : options_(options), roots_(roots != nullptr ? roots : &empty_roots_), log_(log) {
  options_.log_every_n_batches = std::max<int64_t>(0, options_.log_every_n_batches);
  options_.log_first_n_batches = std::max<int64_t>(0, options_.log_first_n_batches);
}

void MemoryLeakDetectionCallback::OnPredictionStep() {
  ++batch_;
  MaybeStartHistory();
  const bool log_stats = batch_ <= options_.log_first_n_batches ||
                         options_.log_every_n_batches == 0 ||
                         batch_ % options_.log_every_n_batches == 0;
  if (log_stats) {
    *log_ << "MEMORY [eval_batch_" << batch_ << "] " << FormatMemoryStats(options_.device) << "\n";
    TrackingAllocator::Install().ResetPeak();
  }
  MaybeDumpSnapshot();
  MaybeDiff();
}

void MemoryLeakDetectionCallback::OnEvaluate() {
  batch_ = 0;
  tensors_before_.reset();
  storages_before_.reset();
}

void MemoryLeakDetectionCallback::MaybeStartHistory() {
  if (!options_.snapshot_at_batch.has_value() || history_ != nullptr) return;
  if (batch_ < std::max<int64_t>(*options_.snapshot_at_batch - 5, 1)) return;
  history_ = std::make_unique<RecordMemoryHistory>(options_.snapshot_path, /*max_entries=*/100000,
                                                   /*max_frames=*/16, options_.device);
  *log_ << "MEMORY_SNAPSHOT: recording history from eval batch " << batch_ << "\n";
}

void MemoryLeakDetectionCallback::MaybeDumpSnapshot() {
  if (history_ == nullptr || batch_ != options_.snapshot_at_batch) return;
  if (absl::Status done = history_->Finish(); done.ok()) {
    *log_ << "MEMORY_SNAPSHOT: dumped to " << options_.snapshot_path << "\n";
  } else {
    *log_ << "MEMORY_SNAPSHOT: could not dump: " << done.message() << "\n";
  }
  history_.reset();
}

void MemoryLeakDetectionCallback::MaybeDiff() {
  if (!options_.diff_between_batches.has_value()) return;
  const auto [b1, b2] = *options_.diff_between_batches;
  if (batch_ == b1) {
    tensors_before_ = CollectTensorInventory(*roots_);
    storages_before_ = CollectStorageInventory(*roots_);
    *log_ << "DIFF: " << tensors_before_->size() << " tensors / " << storages_before_->size()
          << " unique storages at eval batch " << b1 << "\n";
  } else if (batch_ == b2 && tensors_before_.has_value()) {
    const TensorInventory tensors = CollectTensorInventory(*roots_);
    const StorageInventory storages = CollectStorageInventory(*roots_);
    *log_ << "DIFF: " << tensors.size() << " tensors / " << storages.size()
          << " unique storages at eval batch " << b2 << "\n";
    const std::string label = absl::StrCat("eval_batches_", b1, "_to_", b2);
    tensor_diff_ =
        LogTensorDiff(*tensors_before_, tensors, label, options_.max_diff_buckets, *log_);
    storage_diff_ =
        LogStorageDiff(*storages_before_, storages, label, options_.max_diff_buckets, *log_);
    DescribeLeakedOwners(storages);
  }
}

// The owners of the largest new storages of 1 MiB or more, for up to 3 distinct
// sizes.
void MemoryLeakDetectionCallback::DescribeLeakedOwners(const StorageInventory& after) {
  std::vector<std::pair<const void*, const StorageInfo*>> significant;
  for (const auto& [ptr, info] : after) {
    if (!storages_before_->count(ptr) && info.nbytes >= (1 << 20)) {
      significant.emplace_back(ptr, &info);
    }
  }
  std::stable_sort(significant.begin(), significant.end(), [](const auto& a, const auto& b) {
    return a.second->nbytes > b.second->nbytes;
  });
  std::set<int64_t> sizes;
  for (const auto& [ptr, info] : significant) {
    if (!sizes.insert(info->nbytes).second) continue;
    *log_ << absl::StrFormat("  Storage %.1fMiB ptr=%p\n", info->nbytes / (1024.0 * 1024.0), ptr);
    for (const std::string& owner : DescribeOwners(*roots_, ptr)) {
      *log_ << "    REF: " << owner << "\n";
    }
    if (sizes.size() >= 3) break;
  }
}

}  // namespace kd
