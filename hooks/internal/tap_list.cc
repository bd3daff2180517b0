#include "hooks/internal/tap_list.h"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include "hooks/internal/pooled_args.h"

namespace kd {
namespace hooks_internal {

TapList::~TapList() {
  *alive_ = nullptr;
  // A feed may hold its tap (native models): cut that link.
  for (const std::shared_ptr<Tap>& tap : taps_) tap->feed.Reset();
}

HookHandle TapList::Add(std::string path, HookFn fn, HookValues values, OnRemove on_remove) {
  const int path_id = PathId(path);
  taps_.push_back(std::make_shared<Tap>(std::move(path), path_id, std::move(fn), values));
  Index();
  std::weak_ptr<TapList*> alive = alive_;
  return HookHandle([alive, tap = taps_.back().get(), on_remove = std::move(on_remove)] {
    if (auto list = alive.lock(); list && *list) (*list)->Remove(tap, on_remove);
  });
}

void TapList::Remove(const Tap* tap, const OnRemove& on_remove) {
  auto it = std::find_if(taps_.begin(), taps_.end(),
                         [tap](const std::shared_ptr<Tap>& t) { return t.get() == tap; });
  if (it == taps_.end()) return;
  std::shared_ptr<Tap> removed = std::move(*it);
  taps_.erase(it);
  Index();
  removed->feed.Reset();
  if (on_remove) on_remove(*removed);
  // A dispatch in progress may be running it: it goes once every dispatch is over.
  if (dispatching_ > 0) removed_.push_back(std::move(removed));
}

int TapList::PathId(const std::string& path) {
  auto it = std::find(paths_.begin(), paths_.end(), path);
  if (it != paths_.end()) return static_cast<int>(it - paths_.begin());
  paths_.push_back(path);
  return static_cast<int>(paths_.size()) - 1;
}

void TapList::DispatchAny(int path_id, c10::ArrayRef<c10::IValue> args, const c10::IValue& output,
                          c10::ArrayRef<c10::IValue> args_now, const c10::IValue& output_now) {
  // By index: a tap may remove taps while it runs (Remove keeps them alive until every
  // dispatch is over, so that none is held, and its count touched, per call).
  struct Dispatching {
    explicit Dispatching(TapList& list) : list(list) { ++list.dispatching_; }
    ~Dispatching() {
      if (--list.dispatching_ == 0 && !list.removed_.empty()) list.removed_.clear();
    }
    TapList& list;
  } dispatching(*this);
  // The vectors HookFns take, made at the first that needs each.
  std::optional<PooledArgs> vector, vector_now;
  auto as_vector = [](std::optional<PooledArgs>& v,
                      c10::ArrayRef<c10::IValue> values) -> const std::vector<c10::IValue>& {
    if (!v.has_value()) v.emplace().Borrow(values);
    return **v;
  };
  for (size_t i = 0; i < by_path_[path_id].taps.size(); ++i) {
    Tap& tap = *by_path_[path_id].taps[i];
    const bool now = tap.values != HookValues::kReferences;
    const c10::ArrayRef<c10::IValue> values = now ? args_now : args;
    const c10::IValue& out = now ? output_now : output;
    if (tap.span_hook != nullptr) {
      FireSpan(tap, values, out);
    } else if (!now || args_now.data() == args.data()) {
      Fire(tap, as_vector(vector, args), out);
    } else {
      as_vector(vector, args);  // made first: pooled vectors go in the reverse order
      Fire(tap, as_vector(vector_now, args_now), out);
    }
  }
}

void TapList::Index() {
  for (PathTaps& path : by_path_) path = PathTaps();
  for (const std::shared_ptr<Tap>& tap : taps_) {
    if (static_cast<size_t>(tap->path_id) >= by_path_.size()) by_path_.resize(tap->path_id + 1);
    PathTaps& path = by_path_[tap->path_id];
    path.taps.push_back(tap.get());
    path.spans_only = path.spans_only && tap->span_hook != nullptr;
  }
}

bool TapList::HasPath(const std::string& path) const {
  return std::any_of(taps_.begin(), taps_.end(),
                     [&](const std::shared_ptr<Tap>& t) { return t->path == path; });
}

bool TapList::HasPath(int path_id) const {
  return static_cast<size_t>(path_id) < by_path_.size() && !by_path_[path_id].taps.empty();
}

std::set<std::string> TapList::AsReturnedPaths() const {
  std::set<std::string> paths;
  for (const std::shared_ptr<Tap>& tap : taps_) {
    if (tap->values == HookValues::kAsReturned) paths.insert(tap->path);
  }
  return paths;
}

std::vector<std::string> TapList::Paths() const {
  std::set<std::string> paths;
  for (const std::shared_ptr<Tap>& tap : taps_) paths.insert(tap->path);
  return {paths.begin(), paths.end()};
}

}  // namespace hooks_internal
}  // namespace kd
