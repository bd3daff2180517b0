// A hooked call's argument vector without an allocation per call, and borrowed values (no
// reference count touched) for what outlives the hooks' call anyway.
#ifndef LIBKD_HOOKS_INTERNAL_POOLED_ARGS_H_
#define LIBKD_HOOKS_INTERNAL_POOLED_ARGS_H_

#include <type_traits>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/MaybeOwned.h>

namespace kd {
namespace hooks_internal {

// An empty std::vector<c10::IValue> of this thread's, by call depth, given
// back, emptied with its capacity kept, when this goes: HookFn takes a call's
// args as a vector, and allocating one per hooked call cost as much as the rest
// of the call. Nested calls (a hook that runs a forward) take vectors of their
// own. Destroyed in the reverse order of construction (a scope's local).
class PooledArgs {
 public:
  PooledArgs();
  ~PooledArgs();
  PooledArgs(const PooledArgs&) = delete;
  PooledArgs& operator=(const PooledArgs&) = delete;

  std::vector<c10::IValue>& operator*() const { return *args_; }
  std::vector<c10::IValue>* operator->() const { return args_; }

  // Fills the (empty) vector with borrows of `values` (c10::MaybeOwnedTraits: no reference
  // count is touched), which must outlive this and stay unchanged while it lives; the borrows
  // are let go, not destroyed, when this goes. Copies of them are ordinary owning values.
  void Borrow(c10::ArrayRef<c10::IValue> values);

 private:
  std::vector<c10::IValue>* args_;
  bool borrowed_ = false;
};

// A call's output as an IValue for its hooks: a borrow of a tensor (which must outlive this),
// an owning conversion of anything else (None where there is none).
template <typename T>
class OutputValue {
 public:
  explicit OutputValue(const T& value) : value_(Make(value)) {}
  ~OutputValue() {
    if constexpr (std::is_same_v<T, at::Tensor>) {
      c10::MaybeOwnedTraits<c10::IValue>::destroyBorrow(value_);
    }
  }
  OutputValue(const OutputValue&) = delete;
  OutputValue& operator=(const OutputValue&) = delete;

  const c10::IValue& operator*() const { return value_; }

 private:
  static c10::IValue Make(const T& value) {
    if constexpr (std::is_same_v<T, at::Tensor>) {
      return c10::IValue(c10::MaybeOwnedTraits<at::Tensor>::createBorrow(value));
    } else if constexpr (std::is_constructible_v<c10::IValue, const T&>) {
      return c10::IValue(value);
    } else {
      return c10::IValue();
    }
  }

  c10::IValue value_;
};

}  // namespace hooks_internal
}  // namespace kd

#endif  // LIBKD_HOOKS_INTERNAL_POOLED_ARGS_H_
