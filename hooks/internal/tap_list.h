// The taps of one model, by id and module path: shared by the Model implementations.
#ifndef LIBKD_HOOKS_INTERNAL_TAP_LIST_H_
#define LIBKD_HOOKS_INTERNAL_TAP_LIST_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hooks/model.h"

namespace kd {
namespace internal {

class TapList {
 public:
  struct Tap {
    int64_t id;
    std::string path;
    TapFn fn;
    bool fired = false;
    // The id of the hook-point entry that feeds this tap (native models), or -1.
    int64_t native_hook = -1;
    // How many forwards the model had run when the tap was added (native models): a tap that
    // has not fired only counts as bypassed once the model has run a forward since.
    int64_t forwards_at_add = 0;
  };
  using OnRemove = std::function<void(const Tap& removed)>;

  TapList() : alive_(std::make_shared<TapList*>(this)) {}
  ~TapList() { *alive_ = nullptr; }
  TapList(const TapList&) = delete;
  TapList& operator=(const TapList&) = delete;

  // Adds a tap; `on_remove` runs after its handle removes it (while the list lives).
  TapHandle Add(std::string path, TapFn fn, OnRemove on_remove = nullptr);
  // The tap added last.
  Tap& back() { return taps_.back(); }

  // Calls every tap on `path`, in the order they were added.
  void Dispatch(const std::string& path, const std::vector<c10::IValue>& args,
                const c10::IValue& output);
  // Calls the tap with `id`, if it is still there.
  void Fire(int64_t id, const std::vector<c10::IValue>& args, const c10::IValue& output);
  bool HasPath(const std::string& path) const;
  // The distinct tapped paths, sorted.
  std::vector<std::string> Paths() const;
  const std::vector<Tap>& taps() const { return taps_; }

 private:
  void Remove(int64_t id, const OnRemove& on_remove);

  std::vector<Tap> taps_;
  int64_t next_id_ = 0;
  // Lets a TapHandle that outlives this list do nothing.
  std::shared_ptr<TapList*> alive_;
};

}  // namespace internal
}  // namespace kd

#endif  // LIBKD_HOOKS_INTERNAL_TAP_LIST_H_
