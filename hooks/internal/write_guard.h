// Write guards: keep a recorded tensor as it is now at the cost of a reference, and get it
// back as it was when popped, whatever the rest of the forward wrote into it.
//
// A guard holds the tensor's storage, its metadata and its autograd edge, and arms the
// storage's write hook (c10::StorageImpl::set_materializer, the hook libtorch's copy-on-write
// tensors use): libtorch calls it on the first write into the storage (through this tensor or
// any view of it, before the write), and the hook copies the bytes. Nothing is copied while
// the forward leaves the storage alone. Resolve returns the model's own tensor if nothing
// wrote it and its metadata is as it was (its version unchanged: libtorch bumps a tensor's
// version on every in-place op on it, metadata ops such as t_ or resize_ included; or else its
// sizes, strides and offset compared); else it rebuilds the tensor on the copy (or, where only
// the metadata or the tensor's storage changed, on the kept storage) with the recorded metadata
// and autograd edge (a leaf that requires grad: its accumulator, as the leaf's own gradient
// goes). The guards of one storage share its hook, and those of one tensor kept again unchanged
// (a module's output that is the next module's input) share its record.
//
// This is how ForwardHookManager records HookValues::kAsReturned on models that cannot say
// which values their forward writes later (native models): a reference and a guard per value
// instead of a copy-on-write tensor per value. Where a guard cannot serve (see Keep), the value
// is copied lazily at once, as before.
//
//   hooks_internal::WriteGuards guards;
//   hooks_internal::WriteGuard guard;
//   c10::IValue kept = y;
//   guards.Keep(kept, guard);      // kept is still y
//   y.relu_();                     // the write hook copies y's bytes, then the relu_ writes
//   guards.ResolveInPlace(kept, guard);  // kept is y as it was before the relu_
//   guards.Reset();
//
// Armed storages are kept alive until their guards go (pop, clear). A storage takes one write
// hook at a time: while a guard is armed on it, at::_lazy_clone of it fails libtorch's
// "materializer already active" assert (kd::LazyCloneValue, hooks/internal/lazy_clone.h, copies
// such storages eagerly).
#ifndef LIBKD_HOOKS_INTERNAL_WRITE_GUARD_H_
#define LIBKD_HOOKS_INTERNAL_WRITE_GUARD_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/intrusive_ptr.h>
#include <c10/util/typeid.h>

namespace torch {
namespace autograd {
struct AutogradMeta;
struct Node;
}  // namespace autograd
}  // namespace torch

namespace kd {
namespace hooks_internal {

// What one kept tensor needs to come back as it was. Movable.
struct KeptTensor {
  // The kept tensor's sizes and strides.
  c10::IntArrayRef sizes() const { return {layout(), static_cast<size_t>(dim)}; }
  c10::IntArrayRef strides() const { return {layout() + dim, static_cast<size_t>(dim)}; }

  static constexpr int64_t kInlineDims = 5;
  // The tensor it was kept from: compared (values of that tensor, unchanged, share this), never
  // dereferenced.
  const c10::TensorImpl* impl = nullptr;
  int32_t dim = 0;
  // Sizes, then strides: inline up to kInlineDims dimensions (left uninitialized: Keep writes
  // them before anything reads them), else on the heap.
  int64_t layout_inline[2 * kInlineDims];
  std::unique_ptr<int64_t[]> layout_heap;
  int64_t storage_offset = 0;
  c10::DispatchKeySet key_set;
  caffe2::TypeMeta dtype;
  bool inference = false;
  // A leaf that requires grad: its history is its accumulator (the gradient edge of the
  // tensor it was kept from, found again if it is rebuilt).
  bool leaf = false;
  // The tensor's version when kept (libtorch bumps it on every in-place op on the tensor or a
  // view of it, metadata changes included); -1: no version counter (an inference tensor).
  int64_t version = -1;
  c10::intrusive_ptr<torch::autograd::Node> grad_fn;  // null: no autograd history, or a leaf's
  uint32_t output_nr = 0;

 private:
  const int64_t* layout() const { return dim <= kInlineDims ? layout_inline : layout_heap.get(); }
};

// One kept value's guard; empty when the value was copied instead. Movable; destroying an armed
// guard releases its share of the storage's write hook.
struct WriteGuard {
  WriteGuard();
  ~WriteGuard();
  WriteGuard(WriteGuard&& other) noexcept;
  WriteGuard& operator=(WriteGuard&& other) noexcept;

  bool armed() const { return slot >= 0; }

  int32_t slot = -1;  // the armed storage's hook slot; -1: nothing guarded
  // Whether `kept` holds what the value needs; else the slot's first kept tensor does (the
  // value is that tensor, unchanged: a module's output that is the next module's input).
  bool own = false;
  KeptTensor kept;
};

// The guards of one recorder (a ForwardHookManager), used from one thread; the write hooks
// may run on any thread. There are 4096 hook slots in a process (a write hook is a plain
// function pointer, so each slot is a function of its own): past that many storages armed at
// once, values are copied lazily at once.
class WriteGuards {
 public:
  WriteGuards();
  ~WriteGuards();
  WriteGuards(const WriteGuards&) = delete;
  WriteGuards& operator=(const WriteGuards&) = delete;

  // Guards the tensor `value` with `guard` (empty: new or resolved) and leaves it as is (a
  // reference; it must stay alive, unreplaced, while `guard` is armed), or, where a guard
  // cannot serve (no tensor, a tuple, a sparse or wrapped tensor, a storage without an
  // allocator, one another recorder guards or copy-on-write shares, a tensor that requires grad
  // recorded without autograd, a view without history that requires grad, no free slot),
  // replaces it by a copy (lazy where libtorch can) and leaves `guard` empty. Values of one
  // storage share its hook; values of one tensor, unchanged, share what Resolve needs of it.
  void Keep(c10::IValue& value, WriteGuard& guard);

  // Makes `value` what it was when Keep guarded it with `guard` (which it empties): left as
  // it is where nothing changed it (no write into its storage, the same storage and version,
  // or else the same sizes, strides and offset), else rebuilt. Two values kept from one
  // tensor come back as one tensor, as they were recorded, until Reset().
  void ResolveInPlace(c10::IValue& value, WriteGuard& guard);
  // The same, returned.
  c10::IValue Resolve(c10::IValue value, WriteGuard& guard) {
    ResolveInPlace(value, guard);
    return value;
  }

  // Forgets the tensors rebuilt and the storages armed so far (their guards stay valid; a
  // storage kept again after Reset is copied instead of shared).
  void Reset();

  // How many armed storages were written, and so copied, in this process: for tests.
  static int64_t CopiesMade();

 private:
  struct Rebuilt {
    at::Tensor original;  // held: its address identifies it
    at::Tensor tensor;
    // The history it was rebuilt with (KeptTensor's fields of the same names).
    const torch::autograd::Node* grad_fn;
    uint32_t output_nr;
    bool leaf;
  };

  // A slot armed on `storage` (a new one, or this recorder's existing one), or -1; it
  // becomes last_. ArmAgain: past the slot used last.
  int32_t Arm(c10::StorageImpl& storage);
  int32_t ArmAgain(c10::StorageImpl& storage);
  // A slot for a storage not armed yet: one of spare_, else a free one of the process's.
  int32_t TakeSlot();
  // Guards `impl` (a plain tensor on `storage`) with `guard`, with the history `grad_fn`,
  // `output_nr` and `leaf` (none where the tensor needs none); false where no slot serves.
  bool Guard(const c10::TensorImpl& impl, c10::StorageImpl& storage, WriteGuard& guard,
             const c10::intrusive_ptr<torch::autograd::Node>& grad_fn, uint32_t output_nr,
             bool leaf);
  // Keep for the tensor the last Keep kept, unchanged since (a module's output that is the
  // next module's input): a share of its slot and record, without the checks made then; false
  // where it is another tensor or changed.
  bool KeepAgain(const c10::TensorImpl& impl, WriteGuard& guard);
  // Keep for a tensor that requires grad (`impl` with autograd `meta`, on the guardable
  // `storage`).
  void KeepWithHistory(c10::IValue& value, c10::TensorImpl& impl,
                       const torch::autograd::AutogradMeta& meta, c10::StorageImpl& storage,
                       WriteGuard& guard);
  // Resolve for a tensor something changed: `value` as `kept`, on the kept bytes of `slot`.
  void Rebuild(c10::IValue& value, const KeptTensor& kept, int32_t slot, bool written);
  // Whether slot `index` is this recorder's, armed on `storage` and unwritten; if so, counts
  // one more guard on it.
  bool Share(int32_t index, const c10::StorageImpl& storage) const;

  // One guard less on slot `index` (`own`: one that does not share the slot's first record);
  // the last one disarms the storage and frees the slot.
  static void Release(int32_t index, bool own);
  static void Free(int32_t index);
  friend struct WriteGuard;

  int32_t last_ = -1;           // the slot Keep used last
  std::vector<int32_t> armed_;  // the slots armed since Reset
  std::vector<Rebuilt> rebuilt_;
  // Slots this recorder took from the process's and keeps for its next storages (a few: the
  // rest go back), so that arming one touches no shared state.
  std::vector<int32_t> spare_;
  int live_slots_ = 0;  // slots armed for this recorder now
  int chunk_hint_;      // where this recorder looks for free slots first
};

}  // namespace hooks_internal
}  // namespace kd

#endif  // LIBKD_HOOKS_INTERNAL_WRITE_GUARD_H_
