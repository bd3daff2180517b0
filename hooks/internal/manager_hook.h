// One ForwardHookManager hook, the manager's hot path: what a hooked call records (Record runs
// on every call of the hooked module), where it keeps it until the pop (the last call's values
// in slots of their own, else per device and call), and how those become I/O dict values. The
// manager (hooks/forward_hook_manager.cc) adds, checks and pops its hooks; only it includes this.
#ifndef LIBKD_HOOKS_INTERNAL_MANAGER_HOOK_H_
#define LIBKD_HOOKS_INTERNAL_MANAGER_HOOK_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>
#include <c10/util/ArrayRef.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hooks/forward_hook_manager.h"
#include "hooks/hook.h"
#include "hooks/internal/recorded_values.h"
#include "hooks/internal/tap_list.h"
#include "hooks/internal/write_guard.h"
#include "hooks/model.h"

namespace kd {

// One hook: its options, its recorded values (hooks/internal/recorded_values.h), and the handle
// that keeps its recorder in place.
struct ForwardHookManager::Hook final : hooks_internal::SpanHook {
  using OnDevice = hooks_internal::RecordedOnDevice;
  using Recorded = hooks_internal::Recorded;

  std::string key;
  HookOptions options;
  Recorded input, output;
  // The common case, apart from `input` and `output`: a hook that does not accumulate keeps its
  // last call's values here, with their write guards, while a forward's calls are on one
  // device. A call on a second device (replicas) spills them into `input` and `output`, which
  // take every call until the pop (`spilled`).
  struct Last {
    c10::IValue values[2];                 // input, output (None where not required)
    hooks_internal::WriteGuard guards[2];  // with write_guards
    c10::Device device{c10::kCPU};
    bool set = false;
  } last;
  bool spilled = false;
  const Model* model = nullptr;  // null for a raw native module
  std::string module_type;       // raw native modules, for messages
  bool fired = false;            // raw native modules
  // Non-null: the hook receives references and keeps them as returned with these guards (a
  // model that does not know its later writes, with HookValues::kAsReturned).
  hooks_internal::WriteGuards* write_guards = nullptr;
  HookHandle handle;  // declared last: removed first

  // The hot path: one call of the hooked module.
  void Record(c10::ArrayRef<c10::IValue> args, const c10::IValue& output_value) override {
    fired = true;
    const c10::IValue& out =
        output_value.isTuple() && output_value.toTupleRef().elements().size() == 1
            ? output_value.toTupleRef().elements()[0]
            : output_value;
    const c10::Device on = hooks_internal::RecordingDevice(out, args);
    if (!options.accumulates && !spilled) [[likely]] {
      if (!last.set || last.device == on) [[likely]] {
        last.device = on;
        last.set = true;
        if (options.requires_input) {
          if (args.size() == 1) [[likely]] {
            Put(last.values[0], args[0]);
          } else {
            last.values[0] = c10::ivalue::Tuple::create(args.vec());
          }
          if (write_guards != nullptr) GuardLast(0);
        }
        if (options.requires_output) {
          Put(last.values[1], out);
          if (write_guards != nullptr) GuardLast(1);
        }
        return;
      }
      Spill();
    }
    RecordElsewhere(args, out, on);
  }

  // Record beyond the common case: accumulated, guarded or on several devices. Out of line:
  // the hot path saves fewer registers.
  [[gnu::noinline]] void RecordElsewhere(c10::ArrayRef<c10::IValue> args, const c10::IValue& out,
                                         c10::Device on) {
    // The input first: it is usually the output the previous hooked module returned, and
    // shares its write guard.
    if (options.requires_input) {
      if (args.size() == 1) [[likely]] {
        Store(input, on, args[0]);
      } else {
        Store(input, on, c10::IValue(c10::ivalue::Tuple::create(args.vec())));
      }
    }
    if (options.requires_output) Store(output, on, out);
  }

  // slot = value; a copy constructed in place where slot is None (as after a pop): IValue's
  // copy assignment would swap, twice the work on the hot path.
  static void Put(c10::IValue& slot, const c10::IValue& value) {
    if (slot.isNone()) [[likely]] {
      std::destroy_at(&slot);
      std::construct_at(&slot, value);
    } else {
      slot = value;
    }
  }

  // last's values as returned (their guards resolved and emptied).
  void ResolveLast() {
    if (options.requires_input) write_guards->ResolveInPlace(last.values[0], last.guards[0]);
    if (options.requires_output) write_guards->ResolveInPlace(last.values[1], last.guards[1]);
  }

  // Whether `input` or `output` holds values.
  bool Holds() const {
    for (const Recorded* recorded : {&input, &output}) {
      for (const OnDevice& d : *recorded) {
        if (!d.values.empty()) return true;
      }
    }
    return false;
  }

  // Keeps last.values[slot] as returned with its write guard (the replaced call's released).
  void GuardLast(int slot) {
    hooks_internal::WriteGuard& guard = last.guards[slot];
    if (guard.armed()) guard = hooks_internal::WriteGuard();
    write_guards->Keep(last.values[slot], guard);
  }

  // Moves `last` into `input` and `output`, which take the calls from here until the pop.
  void Spill() {
    spilled = true;
    if (!last.set) return;
    last.set = false;
    for (int slot : {0, 1}) {
      if (slot == 0 ? options.requires_input : options.requires_output) {
        hooks_internal::AppendKept(slot == 0 ? input : output, last.device,
                                   std::exchange(last.values[slot], {}),
                                   write_guards != nullptr ? &last.guards[slot] : nullptr);
      }
    }
  }

  void Store(Recorded& recorded, c10::Device device, const c10::IValue& value) {
    hooks_internal::StoreValue(recorded, device, value, options.accumulates, write_guards);
  }

  // The recorded values as returned: what a write guard kept, where the forward wrote later.
  void Resolve(OnDevice& on) { hooks_internal::ResolveValues(on, write_guards); }
  void Resolve() {
    if (write_guards == nullptr) return;
    for (OnDevice& d : input) Resolve(d);
    for (OnDevice& d : output) Resolve(d);
  }

  void Clear() {
    hooks_internal::ClearValues(input);
    hooks_internal::ClearValues(output);
    last = Last();
    spilled = false;
  }

  // The I/O dict value of `values`, this hook's calls in order.
  absl::StatusOr<c10::IValue> Finish(absl::string_view io_type,
                                     std::vector<c10::IValue> values) const {
    return hooks_internal::CombineCalls(
        std::move(values),
        {.accumulates = options.accumulates, .stacks_accumulated = options.stacks_accumulated}, key,
        io_type);
  }
};

}  // namespace kd

#endif  // LIBKD_HOOKS_INTERNAL_MANAGER_HOOK_H_
