// kd::LazyCloneValue: the copy-on-write copy hooks make of a recorded value (HookValues::
// kAsReturned through a hook point, and a write guard's fallback where it cannot serve).
//
//   c10::IValue kept = kd::LazyCloneValue(output);  // shares output's memory until a write
//
// at::_lazy_clone asserts on a storage that already has a write hook (a write guard,
// hooks/internal/write_guard.h, arms one), so such tensors are copied at once instead.
#ifndef LIBKD_HOOKS_INTERNAL_LAZY_CLONE_H_
#define LIBKD_HOOKS_INTERNAL_LAZY_CLONE_H_

#include <ATen/core/ivalue.h>

namespace kd {

// `value` with every tensor lazily cloned (copy-on-write: the copy shares memory until either
// side is written; autograd records it); tensors whose storage has another write hook (a
// write guard, hooks/internal/write_guard.h) are cloned at once; undefined ones stay as they are.
c10::IValue LazyCloneValue(const c10::IValue& value);

}  // namespace kd

#endif  // LIBKD_HOOKS_INTERNAL_LAZY_CLONE_H_
