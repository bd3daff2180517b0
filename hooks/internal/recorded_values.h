// What a ForwardHookManager hook holds between a forward and the pop, and how it becomes an
// I/O dict value: the values of one io type (inputs or outputs) per device, in call order,
// each with the write guard that keeps it as returned; the gather of several devices'
// values (torchdistill's, for replicas); and the list or stack of several calls' values.
// The manager (hooks/forward_hook_manager.cc, its hooks in hooks/internal/manager_hook.h)
// decides which hooks record and when to pop.
//
//   hooks_internal::Recorded outputs;  // of the hook on "fc"
//   hooks_internal::StoreValue(outputs, c10::kCPU, y, /*accumulates=*/true,
//   /*write_guards=*/nullptr);
//   ...  // more calls
//   KD_ASSIGN_OR_RETURN(c10::IValue list, hooks_internal::CombineCalls(outputs.front().values,
//                                                                {.accumulates = true}, "fc",
//                                                                kOutput));
#ifndef LIBKD_HOOKS_INTERNAL_RECORDED_VALUES_H_
#define LIBKD_HOOKS_INTERNAL_RECORDED_VALUES_H_

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/ivalue_util.h"
#include "hooks/internal/write_guard.h"

namespace kd {
namespace hooks_internal {

// The values of one io type recorded on one device, in call order (one if !accumulates).
struct RecordedOnDevice {
  c10::Device device;
  std::vector<c10::IValue> values;
  // With write guards: one per value (guards[i] for values[i]), resolved (and emptied)
  // before the values are popped, and kept for the next values.
  std::vector<WriteGuard> guards;
};

// One io type of one hook, per device (usually one).
using Recorded = std::vector<RecordedOnDevice>;

// Where a call's values are recorded: the device of the output's first tensor, else of the
// args', else the CPU.
// (Inline, as StoreValue, ResolveValues and ClearValues: they run on every hooked call.)
inline c10::Device RecordingDevice(const c10::IValue& out, c10::ArrayRef<c10::IValue> args) {
  if (out.isTensor()) return out.toTensor().device();
  std::optional<c10::Device> device = FirstTensorDevice(out);
  for (size_t i = 0; !device && i < args.size(); ++i) device = FirstTensorDevice(args[i]);
  return device.value_or(c10::Device(c10::kCPU));
}

// What `recorded` keeps on `device`, added empty if it keeps nothing there yet.
inline RecordedOnDevice& ValuesOn(Recorded& recorded, c10::Device device) {
  if (!recorded.empty() && recorded.front().device == device) [[likely]] {
    return recorded.front();  // the usual case: one device
  }
  auto it = std::find_if(recorded.begin(), recorded.end(),
                         [device](const RecordedOnDevice& d) { return d.device == device; });
  if (it != recorded.end()) return *it;
  return recorded.emplace_back(RecordedOnDevice{device, {}});
}

// Adds `value`, recorded on `device`, to `recorded`: after the earlier calls' if `accumulates`,
// else in place of the last call's. With `write_guards` (non-null), a guard keeps it as it is
// now (ResolveValues gets it back).
inline void StoreValue(Recorded& recorded, c10::Device device, const c10::IValue& value,
                       bool accumulates, WriteGuards* write_guards) {
  RecordedOnDevice* on = &ValuesOn(recorded, device);
  // The last call wins without `accumulates`.
  const size_t index = on->values.size() - (!accumulates && !on->values.empty() ? 1 : 0);
  c10::IValue& stored =
      index < on->values.size() ? (on->values[index] = value) : on->values.emplace_back(value);
  if (write_guards != nullptr) {
    // Guards outlive their values' pop, resolved (empty), and serve the next calls.
    if (index == on->guards.size()) {
      on->guards.emplace_back();
    } else if (on->guards[index].armed()) {
      on->guards[index] = WriteGuard();  // the replaced call's, released
    }
    write_guards->Keep(stored, on->guards[index]);
  }
}

// Appends `value`, a call's, to `recorded` on `device`, after the earlier calls', with the write
// guard that keeps it (moved from `guard`; null: no write guards).
inline void AppendKept(Recorded& recorded, c10::Device device, c10::IValue value,
                       WriteGuard* guard) {
  RecordedOnDevice& on = ValuesOn(recorded, device);
  if (guard != nullptr) {
    // Guards outlive their values' pop, resolved (empty), and serve the next calls.
    const size_t index = on.values.size();
    if (index < on.guards.size()) {
      on.guards[index] = std::move(*guard);
    } else {
      on.guards.push_back(std::move(*guard));
    }
  }
  on.values.push_back(std::move(value));
}

// `on`'s values as they were returned: what a write guard kept, where the forward wrote later.
// Does nothing without write guards (null).
inline void ResolveValues(RecordedOnDevice& on, WriteGuards* write_guards) {
  if (write_guards == nullptr) return;
  for (size_t i = 0; i < on.values.size(); ++i) {
    write_guards->ResolveInPlace(on.values[i], on.guards[i]);
  }
}

// Drops every recorded value and guard, keeping the capacity for the next calls.
inline void ClearValues(Recorded& recorded) {
  for (RecordedOnDevice& d : recorded) {
    d.values.clear();  // keeps the capacity
    d.guards.clear();
  }
}

// torchdistill's gather: tensors concatenated on dim 0 on `device`, tuples element-wise;
// anything else is the last value, moved to `device`. `values` is not empty.
c10::IValue Gather(const std::vector<c10::IValue>& values, c10::Device device);

// How a hook combines its calls (HookOptions' fields of the same names).
struct CombineOptions {
  bool accumulates = false;
  bool stacks_accumulated = false;
};

// The I/O dict value of the calls' `values` (in call order, not empty): the last one, or with
// `accumulates` a list of them, or with `stacks_accumulated` one tensor stacked on a new dim
// 0. Errors: InvalidArgument naming `key` and `io_type` when a value to stack is not a tensor
// or the shapes differ.
absl::StatusOr<c10::IValue> CombineCalls(std::vector<c10::IValue> values, CombineOptions how,
                                         absl::string_view key, absl::string_view io_type);

}  // namespace hooks_internal
}  // namespace kd

#endif  // LIBKD_HOOKS_INTERNAL_RECORDED_VALUES_H_
