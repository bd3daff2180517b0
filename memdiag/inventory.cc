#include "memdiag/inventory.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "memdiag/tracking_allocator.h"

namespace kd {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;

std::string DtypeName(const at::Tensor& t) {
  return absl::StrCat("torch.",
                      std::string(c10::getDtypeNames(t.scalar_type()).first));
}

bool Included(const at::Tensor& t, const InventoryOptions& options) {
  const bool cuda = t.device().is_cuda();
  return cuda ? options.include_cuda
              : (t.device().is_cpu() && options.include_cpu);
}

std::vector<int64_t> Shape(const at::Tensor& t) { return t.sizes().vec(); }

std::string Unowned(const StorageInfo& info) {
  std::string where = info.scope.empty()
                          ? "outside any annotated scope"
                          : absl::StrCat("in scope \"", info.scope, "\"");
  if (info.step >= 0) absl::StrAppend(&where, " step ", info.step);
  return absl::StrCat("unowned: ", info.nbytes, " bytes allocated ", where,
                      " (#", info.seq, ")");
}

template <typename Bucket, typename Key, typename Info, typename Fill>
InventoryDiff<Bucket> Group(const std::map<const void*, Info>& before,
                            const std::map<const void*, Info>& after, Key key,
                            Fill fill) {
  std::map<decltype(key(std::declval<const Info&>())), Bucket> buckets;
  for (const auto& [id, info] : after) {
    if (before.count(id)) continue;
    Bucket& bucket = buckets[key(info)];
    if (bucket.count == 0) fill(bucket, info);
    ++bucket.count;
    bucket.total_bytes += info.nbytes;
  }
  InventoryDiff<Bucket> diff;
  for (auto& [k, bucket] : buckets) {
    diff.total_bytes += bucket.total_bytes;
    diff.buckets.push_back(std::move(bucket));
  }
  std::stable_sort(diff.buckets.begin(), diff.buckets.end(),
                   [](const Bucket& a, const Bucket& b) {
                     return a.total_bytes > b.total_bytes;
                   });
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

void MemoryRoots::Add(const std::string& name,
                      std::function<void(const TensorVisitor&)> visit) {
  roots_[name] = std::move(visit);
}

void MemoryRoots::AddTensor(const std::string& name, const at::Tensor* tensor) {
  Add(name,
      [name, tensor](const TensorVisitor& visit) { visit(name, *tensor); });
}

void MemoryRoots::AddTensors(const std::string& name,
                             const std::vector<at::Tensor>* tensors) {
  Add(name, [name, tensors](const TensorVisitor& visit) {
    for (size_t i = 0; i < tensors->size(); ++i) {
      visit(absl::StrCat(name, "[", i, "]"), (*tensors)[i]);
    }
  });
}

void MemoryRoots::Remove(const std::string& name) { roots_.erase(name); }

void MemoryRoots::Visit(const TensorVisitor& visitor) const {
  for (const auto& [name, visit] : roots_) {
    visit([&](const std::string& path, const at::Tensor& t) {
      if (t.defined()) visitor(path, t);
    });
  }
}

std::vector<std::string> MemoryRoots::names() const {
  std::vector<std::string> out;
  for (const auto& [name, visit] : roots_) out.push_back(name);
  return out;
}

TensorInventory CollectTensorInventory(const MemoryRoots& roots,
                                       const InventoryOptions& options) {
  TensorInventory inventory;
  roots.Visit([&](const std::string& path, const at::Tensor& t) {
    if (!Included(t, options)) return;
    inventory.try_emplace(
        t.unsafeGetTensorImpl(),
        TensorInfo{.shape = Shape(t),
                   .dtype = DtypeName(t),
                   .device = t.device().str(),
                   .nbytes = static_cast<int64_t>(t.numel() * t.element_size()),
                   .path = path});
  });
  return inventory;
}

StorageInventory CollectStorageInventory(const MemoryRoots& roots,
                                         const InventoryOptions& options) {
  StorageInventory inventory;
  std::set<std::pair<const void*, const void*>>
      seen;  // (storage, tensor): a view once
  roots.Visit([&](const std::string& path, const at::Tensor& t) {
    if (!Included(t, options) || !t.has_storage()) return;
    const void* ptr = t.storage().data();
    if (ptr == nullptr) return;  // empty
    StorageInfo& info = inventory[ptr];
    if (info.num_views == 0) {
      info.nbytes = static_cast<int64_t>(t.storage().nbytes());
      info.device = t.device().str();
      info.representative_shape = Shape(t);
      info.representative_dtype = DtypeName(t);
    }
    if (seen.emplace(ptr, t.unsafeGetTensorImpl()).second) {
      ++info.num_views;
      const std::vector<int64_t> shape = Shape(t);
      if (std::find(info.view_shapes.begin(), info.view_shapes.end(), shape) ==
          info.view_shapes.end()) {
        info.view_shapes.push_back(shape);
      }
    }
    info.owners.push_back(path);
  });
  for (auto& [ptr, info] : inventory) {
    std::sort(info.view_shapes.begin(), info.view_shapes.end(),
              [](const auto& a, const auto& b) {
                return std::make_tuple(-static_cast<int64_t>(a.size()), a) <
                       std::make_tuple(-static_cast<int64_t>(b.size()), b);
              });
  }
  if (TrackingAllocator::installed()) {
    TrackingAllocator& tracker = TrackingAllocator::Install();
    for (const Allocation& a : tracker.LiveAllocations()) {
      auto it = inventory.find(a.data);
      if (it != inventory.end()) {
        it->second.seq = a.seq;
        it->second.scope = a.scope;
        it->second.step = a.step;
      } else if (options.include_unowned && options.include_cpu) {
        inventory[a.data] =
            StorageInfo{.nbytes = static_cast<int64_t>(a.nbytes),
                        .device = "cpu",
                        .representative_shape = {},
                        .representative_dtype = "unknown",
                        .num_views = 0,
                        .view_shapes = {},
                        .owners = {},
                        .seq = a.seq,
                        .scope = a.scope,
                        .step = a.step};
      }
    }
  }
  return inventory;
}

TensorDiff DiffTensorInventories(const TensorInventory& before,
                                 const TensorInventory& after) {
  return Group<TensorDiffBucket>(
      before, after,
      [](const TensorInfo& i) {
        return std::make_tuple(i.shape, i.dtype, i.device);
      },
      [](TensorDiffBucket& b, const TensorInfo& i) {
        b.shape = i.shape;
        b.dtype = i.dtype;
        b.device = i.device;
        b.example_path = i.path;
      });
}

StorageDiff DiffStorageInventories(const StorageInventory& before,
                                   const StorageInventory& after) {
  return Group<StorageDiffBucket>(
      before, after,
      [](const StorageInfo& i) {
        return std::make_tuple(i.nbytes, i.device, i.representative_dtype);
      },
      [](StorageDiffBucket& b, const StorageInfo& i) {
        b.nbytes = i.nbytes;
        b.device = i.device;
        b.representative_shape = i.representative_shape;
        b.representative_dtype = i.representative_dtype;
        b.example_view_shapes = i.view_shapes;
        b.example_owner = i.owners.empty() ? Unowned(i) : i.owners.front();
      });
}

TensorDiff LogTensorDiff(const TensorInventory& before,
                         const TensorInventory& after, const std::string& label,
                         int max_buckets, std::ostream& out) {
  TensorDiff diff = DiffTensorInventories(before, after);
  out << absl::StrFormat(
      "TENSOR_DIFF [%s] NEW tensors: count=%d total=%.3fGiB\n", label,
      diff.count(), diff.total_bytes / kGiB);
  const size_t rows = max_buckets <= 0
                          ? diff.buckets.size()
                          : std::min<size_t>(max_buckets, diff.buckets.size());
  for (size_t i = 0; i < rows; ++i) {
    const TensorDiffBucket& b = diff.buckets[i];
    out << absl::StrFormat("  NEW %s %s on %s  x%d  total=%.1fMiB  (e.g. %s)\n",
                           ShapeTuple(b.shape), b.dtype, b.device, b.count,
                           b.total_bytes / kMiB, b.example_path);
  }
  if (rows < diff.buckets.size()) {
    out << absl::StrFormat("  ... (%d more buckets)\n",
                           diff.buckets.size() - rows);
  }
  return diff;
}

StorageDiff LogStorageDiff(const StorageInventory& before,
                           const StorageInventory& after,
                           const std::string& label, int max_buckets,
                           std::ostream& out) {
  StorageDiff diff = DiffStorageInventories(before, after);
  out << absl::StrFormat(
      "STORAGE_DIFF [%s] NEW storages: count=%d total=%.3fGiB\n", label,
      diff.count(), diff.total_bytes / kGiB);
  const size_t rows = max_buckets <= 0
                          ? diff.buckets.size()
                          : std::min<size_t>(max_buckets, diff.buckets.size());
  for (size_t i = 0; i < rows; ++i) {
    const StorageDiffBucket& b = diff.buckets[i];
    out << absl::StrFormat(
        "  NEW storage %.1fMiB on %s  x%d  total=%.1fMiB  (rep: %s %s)\n",
        b.nbytes / kMiB, b.device, b.count, b.total_bytes / kMiB,
        ShapeTuple(b.representative_shape), b.representative_dtype);
    if (!b.example_view_shapes.empty()) {
      std::vector<std::string> shapes;
      for (const auto& s : b.example_view_shapes)
        shapes.push_back(ShapeTuple(s));
      out << "    view_shapes (in one example storage of this bucket): ["
          << absl::StrJoin(shapes, ", ") << "]\n";
    }
    out << "    held by: " << b.example_owner << "\n";
  }
  if (rows < diff.buckets.size()) {
    out << absl::StrFormat("  ... (%d more buckets)\n",
                           diff.buckets.size() - rows);
  }
  return diff;
}

std::vector<std::pair<std::string, at::Tensor>> FindTensorsForDataPtrs(
    const MemoryRoots& roots, const std::set<const void*>& data_ptrs) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  roots.Visit([&](const std::string& path, const at::Tensor& t) {
    if (t.has_storage() && data_ptrs.count(t.storage().data()))
      out.emplace_back(path, t);
  });
  return out;
}

std::vector<std::string> DescribeOwners(const MemoryRoots& roots,
                                        const void* data_ptr) {
  std::vector<std::string> owners;
  for (const auto& [path, tensor] : FindTensorsForDataPtrs(roots, {data_ptr})) {
    owners.push_back(absl::StrCat(path, " ", ShapeTuple(Shape(tensor)), " ",
                                  DtypeName(tensor)));
  }
  if (!owners.empty()) return owners;
  Allocation a;
  if (TrackingAllocator::installed() &&
      TrackingAllocator::Install().FindAllocation(data_ptr, &a)) {
    StorageInfo info{.nbytes = static_cast<int64_t>(a.nbytes),
                     .seq = a.seq,
                     .scope = a.scope,
                     .step = a.step};
    return {Unowned(info)};
  }
  return {
      "unknown (no root holds it and the tracking allocator did not allocate "
      "it)"};
}

std::string FormatMemoryStats(c10::Device device) {
  if (device.is_cuda()) return "CUDA not available";
  if (!TrackingAllocator::installed()) {
    return "CPU memory is not tracked (install kd::TrackingAllocator)";
  }
  const TrackingAllocator& t = TrackingAllocator::Install();
  return absl::StrFormat("alloc=%.3fGiB reserved=%.3fGiB peak=%.3fGiB",
                         t.live_bytes() / kGiB, t.live_bytes() / kGiB,
                         t.peak_bytes() / kGiB);
}

std::string ShapeTuple(const std::vector<int64_t>& shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

}  // namespace kd
