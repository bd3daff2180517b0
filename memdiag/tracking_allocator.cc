#include "memdiag/tracking_allocator.h"

#include <execinfo.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

namespace kd {
namespace {

// The header before each allocation's data: one alignment unit, so the data
// keeps c10's alignment. The data pointer is also the DataPtr's context, as
// Allocator::raw_allocate requires (oneDNN allocates its scratch space that
// way).
struct Header {
  size_t nbytes;
  uint64_t seq;
  int64_t step;
  Header* prev;
  Header* next;
  uint32_t scope;
  uint32_t shard;
  uint32_t mark;  // the last inventory that met it through a root (memdiag_internal::Meet)
  uint32_t slot;  // that inventory's entry for it (valid while mark is its epoch)
};
constexpr size_t kHeader = c10::gAlignment;
static_assert(sizeof(Header) <= kHeader, "the header must fit one alignment unit");

constexpr uint32_t kShards = 16;

// A circular list of live allocations with a sentinel, behind its own lock.
struct Shard {
  std::mutex mu;
  Header head{0, 0, 0, &head, &head, 0, 0, 0, 0};
};
Shard shards[kShards];

std::atomic<uint32_t> next_shard{0};
thread_local const uint32_t my_shard = next_shard.fetch_add(1) % kShards;

std::atomic<uint64_t> next_seq{0};

// Interned scope names: id 0 is "" (no annotation).
std::mutex scopes_mu;
std::vector<std::string>& ScopeNames() {
  static auto* names = new std::vector<std::string>{""};
  return *names;
}
std::unordered_map<std::string, uint32_t>& ScopeIds() {
  static auto* ids = new std::unordered_map<std::string, uint32_t>{{"", 0}};
  return *ids;
}
uint32_t InternScope(absl::string_view name) {
  std::lock_guard<std::mutex> lock(scopes_mu);
  auto [it, inserted] = ScopeIds().try_emplace(std::string(name), 0);
  if (inserted) {
    it->second = static_cast<uint32_t>(ScopeNames().size());
    ScopeNames().push_back(it->first);
  }
  return it->second;
}
std::string NameOfScope(uint32_t id) {
  std::lock_guard<std::mutex> lock(scopes_mu);
  return ScopeNames()[id];
}

thread_local uint32_t current_scope = 0;
thread_local int64_t current_step = -1;

TrackingAllocator* tracker = nullptr;
c10::Allocator* previous_allocator = nullptr;
std::atomic<bool> is_installed{false};
std::mutex install_mu;
uint8_t install_priority = 0;

// History: a bounded queue of events behind one lock (only while recording).
std::mutex history_mu;
std::deque<AllocationEvent> history;
size_t history_max = 0;
int history_frames = 0;

}  // namespace

namespace memdiag_internal {
namespace {
c10::DeleterFnPtr tracked_deleter = nullptr;  // set by NewMarkEpoch, read by Meet
}  // namespace

uint32_t NewMarkEpoch() {
  if (tracker != nullptr) tracked_deleter = tracker->raw_deleter();
  static std::atomic<uint32_t> epoch{0};
  uint32_t e = epoch.fetch_add(1) + 1;
  if (e == 0) e = epoch.fetch_add(1) + 1;  // 0 is "never marked"
  return e;
}

Meeting Meet(const c10::DataPtr& data, uint32_t epoch, uint32_t* slot, LiveRecord* out) {
  // &TrackingAllocator::Delete, without a virtual call per storage.
  if (tracker == nullptr || data.get_deleter() != tracked_deleter || data.get() == nullptr) {
    return Meeting::kUntracked;
  }
  Header* h = reinterpret_cast<Header*>(static_cast<char*>(data.get()) - kHeader);
  if (h->mark == epoch) {
    *slot = h->slot;
    return Meeting::kAgain;
  }
  h->mark = epoch;
  h->slot = *slot;
  *out = {data.get(), h->nbytes, h->seq, h->scope, h->step};
  return Meeting::kFirst;
}

void ForEachLiveUnmarked(uint32_t epoch, int64_t marked,
                         void (*fn)(void* context, const LiveRecord& record), void* context) {
  // What is not marked: the live count less the marked ones. The lists hold the newest first,
  // and leaks are new: the walk usually ends early, and at once when every allocation is owned.
  int64_t left = tracker == nullptr ? 0 : tracker->num_live() - marked;
  for (Shard& shard : shards) {
    if (left <= 0) return;
    std::lock_guard<std::mutex> lock(shard.mu);
    for (const Header* h = shard.head.next; h != &shard.head && left > 0; h = h->next) {
      if (h->mark == epoch) continue;
      fn(context,
         {reinterpret_cast<const char*>(h) + kHeader, h->nbytes, h->seq, h->scope, h->step});
      --left;
    }
  }
}
}  // namespace memdiag_internal

std::string TrackingAllocator::ScopeName(uint32_t scope_id) { return NameOfScope(scope_id); }

TrackingAllocator& TrackingAllocator::Install() {
  std::lock_guard<std::mutex> lock(install_mu);
  if (tracker == nullptr) tracker = new TrackingAllocator();  // never destroyed
  if (!is_installed.load()) {
    previous_allocator = c10::GetAllocator(c10::DeviceType::CPU);
    // SetAllocator keeps the allocator of the highest priority seen: each
    // (re)install and uninstall outranks the last.
    c10::SetAllocator(c10::DeviceType::CPU, tracker, ++install_priority);
    is_installed.store(true);
  }
  return *tracker;
}

void TrackingAllocator::Uninstall() {
  std::lock_guard<std::mutex> lock(install_mu);
  if (!is_installed.load()) return;
  c10::SetAllocator(c10::DeviceType::CPU, previous_allocator, ++install_priority);
  is_installed.store(false);
}

bool TrackingAllocator::installed() { return is_installed.load(); }

c10::DataPtr TrackingAllocator::allocate(size_t nbytes) {
  void* base = c10::alloc_cpu(nbytes + kHeader);
  Header* h = static_cast<Header*>(base);
  h->nbytes = nbytes;
  h->seq = next_seq.fetch_add(1, std::memory_order_relaxed) + 1;
  h->scope = current_scope;
  h->step = current_step;
  h->shard = my_shard;
  h->mark = 0;  // never an epoch: slot is read only after a mark, so it needs no value
  Shard& shard = shards[my_shard];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    h->prev = &shard.head;
    h->next = shard.head.next;
    shard.head.next->prev = h;
    shard.head.next = h;
  }
  void* data = static_cast<char*>(base) + kHeader;
  const int64_t live = live_.fetch_add(static_cast<int64_t>(nbytes)) + nbytes;
  int64_t peak = peak_.load(std::memory_order_relaxed);
  while (live > peak && !peak_.compare_exchange_weak(peak, live)) {
  }
  allocations_.fetch_add(1, std::memory_order_relaxed);
  live_count_.fetch_add(1, std::memory_order_relaxed);
  if (history_on_.load(std::memory_order_relaxed)) {
    Record(AllocationEvent::Action::kAlloc, data, nbytes, h->seq, h->scope, h->step);
  }
  if (c10::memoryProfilingEnabled()) {
    c10::reportMemoryUsageToProfiler(data, static_cast<int64_t>(nbytes), live, 0,
                                     c10::Device(c10::DeviceType::CPU));
  }
  return {data, data, &Delete, c10::Device(c10::DeviceType::CPU)};
}

void TrackingAllocator::Delete(void* data) {
  Header* h = reinterpret_cast<Header*>(static_cast<char*>(data) - kHeader);
  const size_t nbytes = h->nbytes;
  {
    std::lock_guard<std::mutex> lock(shards[h->shard].mu);
    h->prev->next = h->next;
    h->next->prev = h->prev;
  }
  const int64_t live = tracker->live_.fetch_sub(static_cast<int64_t>(nbytes)) - nbytes;
  tracker->live_count_.fetch_sub(1, std::memory_order_relaxed);
  if (tracker->history_on_.load(std::memory_order_relaxed)) {
    tracker->Record(AllocationEvent::Action::kFree, data, nbytes, h->seq, h->scope, h->step);
  }
  if (c10::memoryProfilingEnabled()) {
    c10::reportMemoryUsageToProfiler(data, -static_cast<int64_t>(nbytes), live, 0,
                                     c10::Device(c10::DeviceType::CPU));
  }
  c10::free_cpu(h);
}

void TrackingAllocator::ResetPeak() {
  const int64_t live = live_.load();
  baseline_.store(live);
  peak_.store(live);
}

std::vector<Allocation> TrackingAllocator::LiveAllocations() const {
  // Copied under each shard's lock; scope names looked up after, outside it.
  std::vector<std::pair<Header, const void*>> copies;
  for (Shard& shard : shards) {
    std::lock_guard<std::mutex> lock(shard.mu);
    for (const Header* h = shard.head.next; h != &shard.head; h = h->next) {
      copies.emplace_back(*h, reinterpret_cast<const char*>(h) + kHeader);
    }
  }
  std::vector<Allocation> out;
  out.reserve(copies.size());
  for (const auto& [h, data] : copies) {
    out.push_back({.data = data,
                   .nbytes = h.nbytes,
                   .seq = h.seq,
                   .scope = NameOfScope(h.scope),
                   .step = h.step});
  }
  std::sort(out.begin(), out.end(),
            [](const Allocation& a, const Allocation& b) { return a.seq < b.seq; });
  return out;
}

bool TrackingAllocator::FindAllocation(const void* data, Allocation* out) const {
  Header copy;
  bool found = false;
  for (Shard& shard : shards) {
    std::lock_guard<std::mutex> lock(shard.mu);
    for (const Header* h = shard.head.next; h != &shard.head && !found; h = h->next) {
      if (reinterpret_cast<const char*>(h) + kHeader == data) {
        copy = *h;
        found = true;
      }
    }
    if (found) break;
  }
  if (!found) return false;
  *out = {.data = data,
          .nbytes = copy.nbytes,
          .seq = copy.seq,
          .scope = NameOfScope(copy.scope),
          .step = copy.step};
  return true;
}

void TrackingAllocator::StartHistory(size_t max_entries, int max_frames) {
  std::lock_guard<std::mutex> lock(history_mu);
  history.clear();
  history_max = std::max<size_t>(1, max_entries);
  history_frames = std::max(0, max_frames);
  history_on_.store(true);
}

std::vector<AllocationEvent> TrackingAllocator::StopHistory() {
  history_on_.store(false);
  std::lock_guard<std::mutex> lock(history_mu);
  std::vector<AllocationEvent> out(std::make_move_iterator(history.begin()),
                                   std::make_move_iterator(history.end()));
  history.clear();
  return out;
}

void TrackingAllocator::Record(AllocationEvent::Action action, const void* data, size_t nbytes,
                               uint64_t seq, uint32_t scope, int64_t step) {
  AllocationEvent event;
  event.action = action;
  event.allocation = {.data = data, .nbytes = nbytes, .seq = seq, .scope = {}, .step = step};
  event.allocation.scope = NameOfScope(scope);
  event.time_us = std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  std::lock_guard<std::mutex> lock(history_mu);
  if (!history_on_.load(std::memory_order_relaxed)) return;
  if (history_frames > 0) {
    event.frames.resize(history_frames + 2);
    const int n = backtrace(event.frames.data(), static_cast<int>(event.frames.size()));
    // Drop Record and allocate/Delete themselves.
    const int skip = std::min(n, 2);
    event.frames.erase(event.frames.begin(), event.frames.begin() + skip);
    event.frames.resize(n - skip);
  }
  if (history.size() >= history_max) history.pop_front();
  history.push_back(std::move(event));
}

ScopedMemoryAnnotation::ScopedMemoryAnnotation(absl::string_view name, int64_t step)
    : previous_scope_(current_scope), previous_step_(current_step) {
  current_scope = InternScope(name);
  current_step = step;
}

ScopedMemoryAnnotation::~ScopedMemoryAnnotation() {
  current_scope = previous_scope_;
  current_step = previous_step_;
}

}  // namespace kd
