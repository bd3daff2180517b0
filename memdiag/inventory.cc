// Collecting tensor and storage inventories, the owners of a storage, memory stats; the diffs
// and their logs are in memdiag/inventory_diff.cc.
#include "memdiag/inventory.h"

#include <algorithm>
#include <tuple>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "memdiag/internal/cuda_backend.h"
#include "memdiag/internal/inventory_text.h"
#include "memdiag/tracking_allocator.h"

namespace kd {
namespace {

using memdiag_internal::DeviceName;
using memdiag_internal::DtypeName;
using memdiag_internal::kGiB;
using memdiag_internal::Unowned;

bool Included(const at::Tensor& t, const InventoryOptions& options) {
  const bool cuda = t.device().is_cuda();
  return cuda ? options.include_cuda : (t.device().is_cpu() && options.include_cpu);
}

Shape ShapeOf(const at::Tensor& t) { return Shape(t.sizes().begin(), t.sizes().end()); }

// A caching-allocator block no root reaches, as an inventory lists it.
StorageInfo UnownedCudaBlock(const memdiag_internal::CudaBlock& block) {
  return StorageInfo{
      .nbytes = block.size,
      .device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(block.device))};
}

}  // namespace

void MemoryRoots::Add(const std::string& name, std::function<void(const TensorVisitor&)> visit) {
  roots_[name] = std::move(visit);
}

void MemoryRoots::AddTensor(const std::string& name, const at::Tensor* tensor) {
  Add(name, [name, tensor](const TensorVisitor& visit) { visit(name, *tensor); });
}

void MemoryRoots::AddTensors(const std::string& name, const std::vector<at::Tensor>* tensors) {
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

TensorInventory CollectTensorInventory(const MemoryRoots& roots, const InventoryOptions& options) {
  TensorInventory inventory;
  roots.Visit([&](const std::string& path, const at::Tensor& t) {
    if (!Included(t, options)) return;
    auto [it, inserted] = inventory.try_emplace(t.unsafeGetTensorImpl());
    if (!inserted) return;
    it->second = TensorInfo{.shape = ShapeOf(t),
                            .dtype = DtypeName(t.scalar_type()),
                            .device = DeviceName(t.device()),
                            .nbytes = static_cast<int64_t>(t.numel() * t.element_size()),
                            .path = path};
  });
  return inventory;
}

std::string StorageInfo::device_name() const { return DeviceName(device); }

std::string StorageInfo::dtype_name() const {
  return representative_dtype ? DtypeName(*representative_dtype) : std::string("unknown");
}

Shape StorageInfo::representative_shape() const {
  return representative < view_shapes.size() ? view_shapes[representative] : Shape();
}

std::string StorageInfo::scope() const {
  return scope_id == 0 ? std::string() : TrackingAllocator::ScopeName(scope_id);
}

StorageInventory::const_iterator StorageInventory::find(const void* data) const {
  auto it = index_.find(data);
  return it == index_.end() ? entries_.end() : entries_.begin() + it->second;
}

std::pair<uint32_t, bool> StorageInventory::Emplace(const void* data) {
  auto [it, inserted] = index_.try_emplace(data, static_cast<uint32_t>(entries_.size()));
  if (inserted) {
    entries_.emplace_back(std::piecewise_construct, std::forward_as_tuple(data),
                          std::forward_as_tuple());
  }
  return {it->second, inserted};
}

void StorageInventory::Append(const void* data) {
  entries_.emplace_back(std::piecewise_construct, std::forward_as_tuple(data),
                        std::forward_as_tuple());
}

void StorageInventory::IndexAppended() {
  // Independent inserts in a tight loop, the next ones' slots prefetched: their cache misses
  // overlap, where inserting during the walk waited for each in turn.
  constexpr size_t kAhead = 8;
  const size_t n = entries_.size();
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) index_.prefetch(entries_[i + kAhead].first);
    index_.try_emplace(entries_[i].first, static_cast<uint32_t>(i));
  }
}

void StorageInventory::Reserve(size_t n) {
  index_.reserve(n);
  entries_.reserve(n);
}

StorageInventory CollectStorageInventory(const MemoryRoots& roots,
                                         const InventoryOptions& options) {
  StorageInventory inventory;
  const bool tracking = TrackingAllocator::installed();
  // Most storages are tracked allocations: size the tables once.
  if (tracking) inventory.Reserve(static_cast<size_t>(TrackingAllocator::Install().num_live()));
  // Each tracked storage met through a root is marked in its allocation header, so that the
  // walk of live allocations below finds the unowned ones without a lookup each.
  const uint32_t epoch = memdiag_internal::NewMarkEpoch();
  // A tensor counts as one view of its storage once: the first TensorImpl met per storage is
  // kept here, the others (storages with several views, rare) in `seen`.
  std::vector<const void*> first_view;
  first_view.reserve(inventory.entries_.capacity());
  absl::flat_hash_set<const void*> seen;
  std::vector<uint32_t> shared;  // entries with several views, whose shapes get sorted
  int64_t marked = 0;            // tracked storages met
  roots.Visit([&](const std::string& path, const at::Tensor& t) {
    if (!Included(t, options) || !t.has_storage()) return;
    const c10::Storage& storage = t.storage();
    const void* ptr = storage.data();
    if (ptr == nullptr) return;  // empty
    // A tracked storage is found again through its allocation header (which keeps its entry),
    // and enters the index after the walk; others go through the index now.
    uint32_t slot = static_cast<uint32_t>(inventory.entries_.size());
    memdiag_internal::LiveRecord record;
    const memdiag_internal::Meeting meeting =
        tracking ? memdiag_internal::Meet(storage.data_ptr(), epoch, &slot, &record)
                 : memdiag_internal::Meeting::kUntracked;
    bool inserted = meeting == memdiag_internal::Meeting::kFirst;
    if (meeting == memdiag_internal::Meeting::kUntracked) {
      std::tie(slot, inserted) = inventory.Emplace(ptr);
    } else if (inserted) {
      inventory.Append(ptr);
    }
    StorageInfo* info = &inventory.entries_[slot].second;
    if (meeting == memdiag_internal::Meeting::kFirst) {
      ++marked;
      info->seq = record.seq;
      info->scope_id = record.scope;
      info->step = record.step;
    }
    const void* impl = t.unsafeGetTensorImpl();
    if (inserted) {
      info->nbytes = static_cast<int64_t>(storage.nbytes());
      info->device = t.device();
      info->representative_dtype = t.scalar_type();
      info->num_views = 1;
      info->view_shapes.emplace_back(t.sizes().begin(), t.sizes().end());
      first_view.push_back(impl);
    } else {
      if (impl != first_view[slot]) {
        if (info->num_views == 1) {
          seen.insert(first_view[slot]);
          shared.push_back(slot);
        }
        if (seen.insert(impl).second) {
          ++info->num_views;
          if (std::none_of(info->view_shapes.begin(), info->view_shapes.end(), [&](const Shape& s) {
                return t.sizes().equals(c10::IntArrayRef(s.data(), s.size()));
              })) {
            info->view_shapes.emplace_back(t.sizes().begin(), t.sizes().end());
          }
        }
      }
    }
    info->owners.push_back(path);
  });
  for (uint32_t index : shared) {
    StorageInfo& info = inventory.entries_[index].second;
    if (info.view_shapes.size() < 2) continue;
    const Shape first = info.view_shapes.front();
    std::sort(info.view_shapes.begin(), info.view_shapes.end(), [](const auto& a, const auto& b) {
      return std::make_tuple(-static_cast<int64_t>(a.size()), a) <
             std::make_tuple(-static_cast<int64_t>(b.size()), b);
    });
    info.representative =
        static_cast<uint32_t>(std::find(info.view_shapes.begin(), info.view_shapes.end(), first) -
                              info.view_shapes.begin());
  }
  inventory.IndexAppended();
  if (tracking && options.include_unowned && options.include_cpu) {
    memdiag_internal::ForEachLiveUnmarked(
        epoch, marked,
        [](void* context, const memdiag_internal::LiveRecord& r) {
          auto* inventory = static_cast<StorageInventory*>(context);
          auto [slot, inserted] = inventory->Emplace(r.data);
          if (!inserted) return;  // a storage an excluded tensor holds
          StorageInfo* info = &inventory->entries_[slot].second;
          info->nbytes = static_cast<int64_t>(r.nbytes);
          info->seq = r.seq;
          info->scope_id = r.scope;
          info->step = r.step;
        },
        &inventory);
  }
  // CUDA memory no root reaches: the caching allocator's active blocks (its snapshot).
  memdiag_internal::CudaMemoryBackend* cuda = memdiag_internal::GetCudaMemoryBackend();
  if (options.include_unowned && options.include_cuda && cuda != nullptr && cuda->Available()) {
    for (const memdiag_internal::CudaBlock& block : cuda->ActiveBlocks()) {
      auto [slot, inserted] = inventory.Emplace(block.address);
      if (inserted) inventory.entries_[slot].second = UnownedCudaBlock(block);
    }
  }
  return inventory;
}

std::vector<std::pair<std::string, at::Tensor>> FindTensorsForDataPtrs(
    const MemoryRoots& roots, const std::set<const void*>& data_ptrs) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  roots.Visit([&](const std::string& path, const at::Tensor& t) {
    if (t.has_storage() && data_ptrs.count(t.storage().data())) out.emplace_back(path, t);
  });
  return out;
}

std::vector<std::string> DescribeOwners(const MemoryRoots& roots, const void* data_ptr) {
  std::vector<std::string> owners;
  for (const auto& [path, tensor] : FindTensorsForDataPtrs(roots, {data_ptr})) {
    owners.push_back(
        absl::StrCat(path, " ", ShapeTuple(ShapeOf(tensor)), " ", DtypeName(tensor.scalar_type())));
  }
  if (!owners.empty()) return owners;
  Allocation a;
  if (TrackingAllocator::installed() && TrackingAllocator::Install().FindAllocation(data_ptr, &a)) {
    return {Unowned(static_cast<int64_t>(a.nbytes), "cpu", a.seq, a.scope, a.step)};
  }
  memdiag_internal::CudaMemoryBackend* cuda = memdiag_internal::GetCudaMemoryBackend();
  if (cuda != nullptr && cuda->Available()) {
    for (const memdiag_internal::CudaBlock& block : cuda->ActiveBlocks()) {
      if (block.address != data_ptr) continue;
      const StorageInfo info = UnownedCudaBlock(block);
      return {Unowned(info.nbytes, info.device_name(), info.seq, info.scope(), info.step)};
    }
  }
  return {"unknown (no root holds it and no allocator libkd sees allocated it)"};
}

std::string FormatMemoryStats(c10::Device device) {
  if (device.is_cuda()) {
    memdiag_internal::CudaMemoryBackend* cuda = memdiag_internal::GetCudaMemoryBackend();
    if (cuda == nullptr) return memdiag_internal::kNoCudaMemorySupport;
    if (!cuda->Available()) return "CUDA not available";
    const memdiag_internal::CudaStats stats = cuda->Stats(device.has_index() ? device.index() : -1);
    return absl::StrFormat("alloc=%.3fGiB reserved=%.3fGiB peak=%.3fGiB", stats.allocated / kGiB,
                           stats.reserved / kGiB, stats.peak / kGiB);
  }
  if (!TrackingAllocator::installed()) {
    return "CPU memory is not tracked (install kd::TrackingAllocator)";
  }
  const TrackingAllocator& t = TrackingAllocator::Install();
  return absl::StrFormat("alloc=%.3fGiB reserved=%.3fGiB peak=%.3fGiB", t.live_bytes() / kGiB,
                         t.live_bytes() / kGiB, t.peak_bytes() / kGiB);
}

std::string ShapeTuple(absl::Span<const int64_t> shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

}  // namespace kd
