#include "hooks/internal/tap_list.h"

#include <algorithm>
#include <set>
#include <utility>

namespace kd {
namespace internal {

TapHandle TapList::Add(std::string path, TapFn fn, OnRemove on_remove) {
  const int64_t id = next_id_++;
  taps_.push_back(Tap{id, std::move(path), std::move(fn)});
  std::weak_ptr<TapList*> alive = alive_;
  return TapHandle([alive, id, on_remove = std::move(on_remove)] {
    if (auto list = alive.lock(); list && *list) (*list)->Remove(id, on_remove);
  });
}

void TapList::Remove(int64_t id, const OnRemove& on_remove) {
  auto it = std::find_if(taps_.begin(), taps_.end(), [id](const Tap& t) { return t.id == id; });
  if (it == taps_.end()) return;
  const Tap removed = std::move(*it);
  taps_.erase(it);
  if (on_remove) on_remove(removed);
}

void TapList::Fire(int64_t id, const std::vector<c10::IValue>& args,
                   const c10::IValue& output) {
  for (Tap& tap : taps_) {
    if (tap.id != id) continue;
    tap.fired = true;
    tap.fn(args, output);
    return;
  }
}

void TapList::Dispatch(const std::string& path, const std::vector<c10::IValue>& args,
                       const c10::IValue& output) {
  for (Tap& tap : taps_) {
    if (tap.path != path) continue;
    tap.fired = true;
    tap.fn(args, output);
  }
}

bool TapList::HasPath(const std::string& path) const {
  return std::any_of(taps_.begin(), taps_.end(), [&](const Tap& t) { return t.path == path; });
}

std::vector<std::string> TapList::Paths() const {
  std::set<std::string> paths;
  for (const Tap& tap : taps_) paths.insert(tap.path);
  return {paths.begin(), paths.end()};
}

}  // namespace internal
}  // namespace kd
