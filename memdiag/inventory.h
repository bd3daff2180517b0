// What memory the program holds, and who holds it: silverspoon-kd's
// memory_diagnostics (collect_tensor_inventory, collect_storage_inventory,
// diff_*, log_*_diff, find_tensors_for_data_ptrs, describe_referrers,
// format_memory_stats) in C++.
//
//   kd::MemoryRoots roots;                  // what the program knows it holds
//   roots.AddTensors("kept", &kept);        // kept[0], kept[1], ...
//   kd::StorageInventory before = kd::CollectStorageInventory(roots);
//   ... run batches ...
//   kd::LogStorageDiff(before, kd::CollectStorageInventory(roots), "eval", 30, std::cerr);
//
// Python walks gc.get_objects(); C++ has no such walk. Tensors are found
// through roots (named containers the program registers: models, optimizer
// state, I/O dicts, lists, single tensors; distill/boxes/memory_roots.h
// registers libkd's own), and storages also through the tracking allocator
// (memdiag/tracking_allocator.h) when it is installed: an allocation no root
// reaches is listed as unowned, with the scope (ScopedMemoryAnnotation) and
// step it was allocated in.
//
// Inventories include CPU tensors by default (silverspoon-kd's default is CUDA
// only: its allocator-level view is CUDA's; libkd's is the CPU tracker). Shapes
// print as Python tuples and dtypes as torch's names ("torch.float32"), as
// silverspoon-kd logs them.
#ifndef LIBKD_MEMDIAG_INVENTORY_H_
#define LIBKD_MEMDIAG_INVENTORY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"

namespace kd {

// A tensor's sizes (no heap allocation up to 5 dims).
using Shape = absl::InlinedVector<int64_t, 5>;

// Called with each tensor a root holds and its path ("student.fc.weight.grad",
// "kept[3]").
using TensorVisitor = std::function<void(const std::string& path, const at::Tensor& tensor)>;

// Named roots: where the program holds tensors. Not thread-safe; the containers
// must outlive their registration (Remove them first).
class MemoryRoots {
 public:
  // A root whose `visit` calls its argument with every tensor it holds (paths
  // should begin with `name`). Replaces a root of the same name.
  void Add(const std::string& name, std::function<void(const TensorVisitor&)> visit);
  // One tensor, under `name`.
  void AddTensor(const std::string& name, const at::Tensor* tensor);
  // A list of tensors, as name[0], name[1], ...
  void AddTensors(const std::string& name, const std::vector<at::Tensor>* tensors);
  void Remove(const std::string& name);
  // Every tensor of every root (defined ones only), roots in name order.
  void Visit(const TensorVisitor& visitor) const;
  std::vector<std::string> names() const;

 private:
  std::map<std::string, std::function<void(const TensorVisitor&)>> roots_;
};

struct InventoryOptions {
  bool include_cpu = true;
  bool include_cuda = true;
  // Storage inventories: also list live tracked allocations no root reaches
  // (unowned).
  bool include_unowned = true;
};

// One tensor a root holds (silverspoon-kd's TensorInfo, plus where it is held).
struct TensorInfo {
  Shape shape;
  std::string dtype;   // "torch.float32"
  std::string device;  // "cpu", "cuda:0"
  int64_t nbytes = 0;  // numel * element size (the view, not its storage)
  std::string path;    // the first root path it was met at
};
// By tensor identity (its TensorImpl), as Python keys by id(tensor).
using TensorInventory = absl::flat_hash_map<const void*, TensorInfo>;

// One storage (silverspoon-kd's StorageInfo), with its owners and allocation. Compact (an
// inventory of 100,000 storages is built in //memdiag:memdiag_benchmark's time): the device,
// dtype and scope are kept as c10's values and interned ids, named by the accessors.
struct StorageInfo {
  int64_t nbytes = 0;  // the storage's true size
  c10::Device device = c10::Device(c10::kCPU);
  // Of the first view met; nullopt for an unowned storage ("unknown").
  std::optional<c10::ScalarType> representative_dtype;
  uint32_t representative = 0;  // the index of the first view's shape in view_shapes
  int32_t num_views = 0;        // tensors met that share it
  // From the tracking allocator (0 / 0 / -1 when it did not allocate this storage).
  uint64_t seq = 0;
  uint32_t scope_id = 0;  // the allocator's id of the innermost ScopedMemoryAnnotation (0: none)
  int64_t step = -1;
  absl::InlinedVector<Shape, 1> view_shapes;   // distinct, most dims first ({} if unowned)
  absl::InlinedVector<std::string, 1> owners;  // root paths of its views (empty: unowned)

  // "cpu", "cuda:0".
  std::string device_name() const;
  // "torch.float32"; "unknown" for an unowned storage.
  std::string dtype_name() const;
  // The first view's shape ({} if unowned).
  Shape representative_shape() const;
  // The annotated scope it was allocated in ("" if none).
  std::string scope() const;
};

// Storages by data pointer: a flat index into entries kept in the order they were met (an
// index of 16-byte slots stays in cache where a table of whole entries would not).
class StorageInventory {
 public:
  using value_type = std::pair<const void*, StorageInfo>;
  using const_iterator = std::vector<value_type>::const_iterator;

  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const_iterator begin() const { return entries_.begin(); }
  const_iterator end() const { return entries_.end(); }
  bool contains(const void* data) const { return index_.contains(data); }
  size_t count(const void* data) const { return index_.count(data); }
  // end() when there is none.
  const_iterator find(const void* data) const;
  const StorageInfo& at(const void* data) const { return find(data)->second; }

 private:
  friend StorageInventory CollectStorageInventory(const MemoryRoots& roots,
                                                  const InventoryOptions& options);
  // The index of the entry of `data` in entries_, and whether it is new.
  std::pair<uint32_t, bool> Emplace(const void* data);
  // A new last entry for `data`, known not to be there, not yet in the index; IndexAppended
  // puts every such entry in the index.
  void Append(const void* data);
  void IndexAppended();
  void Reserve(size_t n);

  absl::flat_hash_map<const void*, uint32_t> index_;
  std::vector<value_type> entries_;
};

TensorInventory CollectTensorInventory(const MemoryRoots& roots,
                                       const InventoryOptions& options = {});
StorageInventory CollectStorageInventory(const MemoryRoots& roots,
                                         const InventoryOptions& options = {});

// New tensors grouped by (shape, dtype, device), largest total first.
struct TensorDiffBucket {
  Shape shape;
  std::string dtype;
  std::string device;
  int64_t count = 0;
  int64_t total_bytes = 0;
  std::string example_path;  // the smallest path among them
};
// New storages grouped by (nbytes, device, dtype), largest total first.
struct StorageDiffBucket {
  int64_t nbytes = 0;
  std::string device;
  Shape representative_shape;
  std::string representative_dtype;
  int64_t count = 0;
  int64_t total_bytes = 0;
  absl::InlinedVector<Shape, 1> example_view_shapes;
  std::string example_owner;  // a root path, or "unowned (scope \"eval\" step
                              // 3, #1234)"
};
template <typename Bucket>
struct InventoryDiff {
  std::vector<Bucket> buckets;
  int64_t total_bytes = 0;
  int64_t count() const;
};
using TensorDiff = InventoryDiff<TensorDiffBucket>;
using StorageDiff = InventoryDiff<StorageDiffBucket>;

// What is in `after` and not in `before` (what disappeared is not reported: the
// point is what leaks).
TensorDiff DiffTensorInventories(const TensorInventory& before, const TensorInventory& after);
StorageDiff DiffStorageInventories(const StorageInventory& before, const StorageInventory& after);

// The diffs, logged as silverspoon-kd logs them (at most `max_buckets` rows, 0:
// all).
TensorDiff LogTensorDiff(const TensorInventory& before, const TensorInventory& after,
                         const std::string& label, int max_buckets, std::ostream& out);
StorageDiff LogStorageDiff(const StorageInventory& before, const StorageInventory& after,
                           const std::string& label, int max_buckets, std::ostream& out);

// The tensors (with their root paths) whose storage begins at one of
// `data_ptrs`.
std::vector<std::pair<std::string, at::Tensor>> FindTensorsForDataPtrs(
    const MemoryRoots& roots, const std::set<const void*>& data_ptrs);

// Who holds the storage at `data_ptr` (silverspoon-kd's describe_referrers):
// the root paths of its views, or one line "unowned: 4000 bytes allocated in
// scope "eval" step 3 (#1234)" when only the tracking allocator knows it, or
// "unknown" when nothing does.
std::vector<std::string> DescribeOwners(const MemoryRoots& roots, const void* data_ptr);

// "alloc=X.XXXGiB reserved=X.XXXGiB peak=X.XXXGiB": on CPU the tracking
// allocator's live and peak bytes (reserved = alloc: nothing caches CPU
// memory), "CPU memory is not tracked (install kd::TrackingAllocator)" without
// it; on CUDA "CUDA not available" in a build without libkd's CUDA memory
// support.
std::string FormatMemoryStats(c10::Device device = c10::Device(c10::kCPU));

// (1, 2, 3) / (5,) / () as Python prints a shape.
std::string ShapeTuple(absl::Span<const int64_t> shape);

}  // namespace kd

#endif  // LIBKD_MEMDIAG_INVENTORY_H_
