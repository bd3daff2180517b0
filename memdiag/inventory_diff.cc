// What is new between two inventories (silverspoon-kd's diff_tensor_inventories,
// diff_storage_inventories) and the logs of it (log_tensor_diff, log_storage_diff); declared in
// memdiag/inventory.h; collecting the inventories is in memdiag/inventory.cc.
#include <algorithm>
#include <map>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "memdiag/internal/inventory_text.h"
#include "memdiag/inventory.h"

namespace kd {
namespace {

using memdiag_internal::kGiB;
using memdiag_internal::kMiB;
using memdiag_internal::Unowned;

// Groups what `after` has and `before` does not by key(info); fill(bucket, info) sets a
// bucket's example from the info that `better` prefers (so the result does not depend on the
// hash order).
template <typename Bucket, typename Inventory, typename Key, typename Fill, typename Better>
InventoryDiff<Bucket> Group(const Inventory& before, const Inventory& after, Key key, Fill fill,
                            Better better) {
  using Info = typename Inventory::value_type::second_type;
  std::map<decltype(key(std::declval<const Info&>())), std::pair<Bucket, const Info*>> buckets;
  for (const auto& [id, info] : after) {
    if (before.contains(id)) continue;
    auto& [bucket, example] = buckets[key(info)];
    if (example == nullptr || better(info, *example)) {
      example = &info;
      fill(bucket, info);
    }
    ++bucket.count;
    bucket.total_bytes += info.nbytes;
  }
  InventoryDiff<Bucket> diff;
  for (auto& [k, entry] : buckets) {
    diff.total_bytes += entry.first.total_bytes;
    diff.buckets.push_back(std::move(entry.first));
  }
  std::stable_sort(diff.buckets.begin(), diff.buckets.end(),
                   [](const Bucket& a, const Bucket& b) { return a.total_bytes > b.total_bytes; });
  return diff;
}

}  // namespace

template <typename Bucket>
int64_t InventoryDiff<Bucket>::count() const {
  int64_t n = 0;
  for (const Bucket& b : buckets) n += b.count;
  return n;
}
template struct InventoryDiff<TensorDiffBucket>;
template struct InventoryDiff<StorageDiffBucket>;

TensorDiff DiffTensorInventories(const TensorInventory& before, const TensorInventory& after) {
  return Group<TensorDiffBucket>(
      before, after,
      [](const TensorInfo& i) { return std::make_tuple(i.shape, i.dtype, i.device); },
      [](TensorDiffBucket& b, const TensorInfo& i) {
        b.shape = i.shape;
        b.dtype = i.dtype;
        b.device = i.device;
        b.example_path = i.path;
      },
      [](const TensorInfo& a, const TensorInfo& b) {
        return a.path.size() != b.path.size() ? a.path.size() < b.path.size() : a.path < b.path;
      });
}

StorageDiff DiffStorageInventories(const StorageInventory& before, const StorageInventory& after) {
  return Group<StorageDiffBucket>(
      before, after,
      [](const StorageInfo& i) {
        return std::make_tuple(i.nbytes, i.device_name(), i.dtype_name());
      },
      [](StorageDiffBucket& b, const StorageInfo& i) {
        b.nbytes = i.nbytes;
        b.device = i.device_name();
        b.representative_shape = i.representative_shape();
        b.representative_dtype = i.dtype_name();
        b.example_view_shapes = i.view_shapes;
        b.example_owner = i.owners.empty()
                              ? Unowned(i.nbytes, i.device_name(), i.seq, i.scope(), i.step)
                              : i.owners.front();
      },
      [](const StorageInfo& a, const StorageInfo& b) {
        if (a.seq != b.seq) return a.seq < b.seq;
        return a.owners < b.owners;
      });
}

TensorDiff LogTensorDiff(const TensorInventory& before, const TensorInventory& after,
                         const std::string& label, int max_buckets, std::ostream& out) {
  TensorDiff diff = DiffTensorInventories(before, after);
  out << absl::StrFormat("TENSOR_DIFF [%s] NEW tensors: count=%d total=%.3fGiB\n", label,
                         diff.count(), diff.total_bytes / kGiB);
  const size_t rows =
      max_buckets <= 0 ? diff.buckets.size() : std::min<size_t>(max_buckets, diff.buckets.size());
  for (size_t i = 0; i < rows; ++i) {
    const TensorDiffBucket& b = diff.buckets[i];
    out << absl::StrFormat("  NEW %s %s on %s  x%d  total=%.1fMiB  (e.g. %s)\n",
                           ShapeTuple(b.shape), b.dtype, b.device, b.count, b.total_bytes / kMiB,
                           b.example_path);
  }
  if (rows < diff.buckets.size()) {
    out << absl::StrFormat("  ... (%d more buckets)\n", diff.buckets.size() - rows);
  }
  return diff;
}

StorageDiff LogStorageDiff(const StorageInventory& before, const StorageInventory& after,
                           const std::string& label, int max_buckets, std::ostream& out) {
  StorageDiff diff = DiffStorageInventories(before, after);
  out << absl::StrFormat("STORAGE_DIFF [%s] NEW storages: count=%d total=%.3fGiB\n", label,
                         diff.count(), diff.total_bytes / kGiB);
  const size_t rows =
      max_buckets <= 0 ? diff.buckets.size() : std::min<size_t>(max_buckets, diff.buckets.size());
  for (size_t i = 0; i < rows; ++i) {
    const StorageDiffBucket& b = diff.buckets[i];
    out << absl::StrFormat("  NEW storage %.1fMiB on %s  x%d  total=%.1fMiB  (rep: %s %s)\n",
                           b.nbytes / kMiB, b.device, b.count, b.total_bytes / kMiB,
                           ShapeTuple(b.representative_shape), b.representative_dtype);
    if (!b.example_view_shapes.empty()) {
      std::vector<std::string> shapes;
      for (const auto& s : b.example_view_shapes) shapes.push_back(ShapeTuple(s));
      out << "    view_shapes (in one example storage of this bucket): ["
          << absl::StrJoin(shapes, ", ") << "]\n";
    }
    out << "    held by: " << b.example_owner << "\n";
  }
  if (rows < diff.buckets.size()) {
    out << absl::StrFormat("  ... (%d more buckets)\n", diff.buckets.size() - rows);
  }
  return diff;
}

}  // namespace kd
