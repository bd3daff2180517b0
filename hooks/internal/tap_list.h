// The hooks of one model, by module path: shared by the Model implementations.
#ifndef LIBKD_HOOKS_INTERNAL_TAP_LIST_H_
#define LIBKD_HOOKS_INTERNAL_TAP_LIST_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <c10/util/ArrayRef.h>

#include "hooks/hook.h"

namespace kd {
namespace hooks_internal {

// A hook that takes a call's args as a span. Wrapped in a HookFn as CallSpanHook, it serves
// every model kind as any HookFn does; where a tap list has the args as a span (TorchScript's
// taps) it is called directly, without the argument vector a HookFn needs. ForwardHookManager's
// recorders are these. Record must not add or remove taps (a path whose taps are all span
// hooks is dispatched without the guard that keeps removed taps alive).
class SpanHook {
 public:
  virtual void Record(c10::ArrayRef<c10::IValue> args, const c10::IValue& output) = 0;

 protected:
  ~SpanHook() = default;
};

// The HookFn of a SpanHook (TapList recognizes it by its type: std::function::target).
struct CallSpanHook {
  SpanHook* hook;
  void operator()(const std::vector<c10::IValue>& args, const c10::IValue& output) const {
    hook->Record(args, output);
  }
};

class TapList {
 public:
  struct Tap {
    Tap(std::string path, int path_id, HookFn fn, HookValues values)
        : path(std::move(path)),
          path_id(path_id),
          fn(std::move(fn)),
          span_hook(this->fn.target<CallSpanHook>() != nullptr
                        ? this->fn.target<CallSpanHook>()->hook
                        : nullptr),
          values(values) {}
    const std::string path;
    const int path_id;  // PathId(path)
    const HookFn fn;
    SpanHook* const span_hook;  // fn's, where fn is a CallSpanHook; else null
    const HookValues values;
    std::atomic<bool> fired{false};
    // How many forwards the model had run when the tap was added (native models): a tap that
    // has not fired only counts as bypassed once the model has run a forward since.
    int64_t forwards_at_add = 0;
    // The hook-point entry that feeds this tap (native models); reset when the tap goes.
    HookHandle feed;
  };
  using OnRemove = std::function<void(const Tap& removed)>;

  // The root's path "" has id kRootPathId.
  static constexpr int kRootPathId = 0;

  TapList() : alive_(std::make_shared<TapList*>(this)) { PathId(""); }
  ~TapList();
  TapList(const TapList&) = delete;
  TapList& operator=(const TapList&) = delete;

  // Adds a tap; `on_remove` runs after its handle removes it (while the list lives).
  HookHandle Add(std::string path, HookFn fn, HookValues values, OnRemove on_remove = nullptr);
  // The tap added last.
  const std::shared_ptr<Tap>& back() const { return taps_.back(); }

  // A small integer for `path`, the same for the list's life (a dispatch
  // compares these, not strings).
  int PathId(const std::string& path);

  // Calls every tap on the path with id `path_id`, in the order they were
  // added: kReferences taps with `args` and `output`, kAsReturned taps with
  // `args_now` and `output_now` (copies where the forward writes them later,
  // else the same values), which stay alive and unchanged during the call. SpanHooks
  // get the spans; HookFns get vectors borrowing them.
  void Dispatch(int path_id, c10::ArrayRef<c10::IValue> args, const c10::IValue& output,
                c10::ArrayRef<c10::IValue> args_now, const c10::IValue& output_now) {
    if (static_cast<size_t>(path_id) >= by_path_.size()) return;
    const PathTaps& path = by_path_[path_id];
    if (!path.spans_only) {
      DispatchAny(path_id, args, output, args_now, output_now);
      return;
    }
    // The common case (ForwardHookManager's recorders only), inline: span hooks neither add
    // nor remove taps, so the path's list holds still.
    for (Tap* tap : path.taps) {
      const bool now = tap->values != HookValues::kReferences;
      FireSpan(*tap, now ? args_now : args, now ? output_now : output);
    }
  }
  // Calls one tap (a span hook directly, without its HookFn's indirection).
  static void Fire(Tap& tap, const std::vector<c10::IValue>& args, const c10::IValue& output) {
    if (tap.span_hook != nullptr) {
      FireSpan(tap, args, output);
      return;
    }
    tap.fired.store(true, std::memory_order_relaxed);
    tap.fn(args, output);
  }
  // Calls a tap that is a span hook with the call's values as spans.
  static void FireSpan(Tap& tap, c10::ArrayRef<c10::IValue> args, const c10::IValue& output) {
    tap.fired.store(true, std::memory_order_relaxed);
    tap.span_hook->Record(args, output);
  }
  bool HasPath(const std::string& path) const;
  bool HasPath(int path_id) const;
  // The distinct paths with a tap that wants HookValues::kAsReturned.
  std::set<std::string> AsReturnedPaths() const;
  // The distinct tapped paths, sorted.
  std::vector<std::string> Paths() const;
  const std::vector<std::shared_ptr<Tap>>& taps() const { return taps_; }

 private:
  // The taps of one path, in the order they were added.
  struct PathTaps {
    std::vector<Tap*> taps;
    bool spans_only = true;  // every tap is a span hook
  };

  void Remove(const Tap* tap, const OnRemove& on_remove);
  // Dispatch for a path with a HookFn that is not a span hook: it may remove taps while it runs.
  void DispatchAny(int path_id, c10::ArrayRef<c10::IValue> args, const c10::IValue& output,
                   c10::ArrayRef<c10::IValue> args_now, const c10::IValue& output_now);
  // Rebuilds by_path_ from taps_.
  void Index();

  std::vector<std::shared_ptr<Tap>> taps_;
  // The taps by path id: what a dispatch runs.
  std::vector<PathTaps> by_path_;
  std::vector<std::string> paths_;             // by path id
  int dispatching_ = 0;                        // dispatches in progress
  std::vector<std::shared_ptr<Tap>> removed_;  // removed during a dispatch, kept until its end
  // Lets a HookHandle that outlives this list do nothing.
  std::shared_ptr<TapList*> alive_;
};

}  // namespace hooks_internal
}  // namespace kd

#endif  // LIBKD_HOOKS_INTERNAL_TAP_LIST_H_
