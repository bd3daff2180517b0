#include "distill/boxes/distributed/rank_monitor.h"

#include <algorithm>
#include <utility>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/torch_status.h"

namespace kd {
namespace {

std::string BeatKey(int rank) { return absl::StrCat("libkd/heartbeat/", rank); }
std::string FailedKey(int rank) { return absl::StrCat("libkd/failed/", rank); }

// Beats that must be missed before a rank counts as lost.
constexpr int kMissedBeats = 5;

}  // namespace

absl::StatusOr<std::unique_ptr<RankMonitor>> RankMonitor::Start(
    const c10::intrusive_ptr<c10d::ProcessGroup>& group, std::chrono::milliseconds period) {
  if (!group || !group->getStore()) {
    return absl::FailedPreconditionError("RankMonitor: the process group has no store");
  }
  std::unique_ptr<RankMonitor> monitor(new RankMonitor());
  monitor->rank_ = group->getRank();
  monitor->world_size_ = group->getSize();
  monitor->period_ = period;
  KD_RETURN_IF_ERROR(CallTorch("RankMonitor: cannot open a connection to the rendezvous store",
                               absl::StatusCode::kFailedPrecondition, [&] {
                                 monitor->store_ = group->getStore()->clone();
                                 monitor->reader_ = group->getStore()->clone();
                                 // A store that stops answering is an answer here: wait a few
                                 // beats, not the run's timeout.
                                 monitor->store_->setTimeout(period * kMissedBeats);
                                 monitor->reader_->setTimeout(period * kMissedBeats);
                                 monitor->store_->add(BeatKey(monitor->rank_), 1);
                               }));
  monitor->thread_ = std::thread([m = monitor.get()] { m->Beat(); });
  return monitor;
}

RankMonitor::~RankMonitor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RankMonitor::Beat() {
  const std::string key = BeatKey(rank_);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period_, [this] { return stop_; })) {
    if (!CallTorch([&] { store_->add(key, 1); }).ok()) {
      return;  // rank 0, which serves the store, is gone (or hangs): Explain will say so
    }
  }
}

void RankMonitor::ReportFailure(absl::string_view reason) {
  // Best effort: a store that is gone has no one left to tell.
  CallTorch([&] {
    reader_->set(FailedKey(rank_), std::vector<uint8_t>(reason.begin(), reason.end()));
  }).IgnoreError();
}

std::vector<int64_t> RankMonitor::ReadBeats() {
  std::vector<int64_t> beats;
  if (!CallTorch([&] {
         for (int r = 0; r < world_size_; ++r) beats.push_back(reader_->add(BeatKey(r), 0));
       }).ok()) {
    beats.clear();  // the store stopped answering
  }
  return beats;
}

std::vector<int> RankMonitor::LostRanks() {
  const std::vector<int64_t> before = ReadBeats();
  if (!before.empty()) std::this_thread::sleep_for(period_ * kMissedBeats);
  const std::vector<int64_t> after = before.empty() ? before : ReadBeats();
  store_unreachable_ = after.empty();  // now, not at some earlier beat
  if (store_unreachable_) return rank_ == 0 ? std::vector<int>() : std::vector<int>{0};
  std::vector<int> lost;
  for (int r = 0; r < world_size_; ++r) {
    if (r != rank_ && after[r] == before[r]) lost.push_back(r);
  }
  return lost;
}

absl::Status RankMonitor::Explain(absl::string_view error) {
  const std::string here = absl::StrCat("; rank ", rank_, " stopped on: ", error);
  std::vector<int> lost = LostRanks();
  if (store_unreachable_ && rank_ != 0) {
    return absl::UnavailableError(
        absl::StrCat("rank 0 of ", world_size_,
                     " was lost: the rendezvous store it serves stopped answering (the "
                     "process died or hangs)",
                     here));
  }
  std::vector<std::string> parts;
  for (int r = 0; r < world_size_; ++r) {
    if (r == rank_) continue;
    std::string reason;  // stays empty if the store cannot tell
    CallTorch([&] {
      if (reader_->check({FailedKey(r)})) {
        const std::vector<uint8_t> bytes = reader_->get(FailedKey(r));
        reason.assign(bytes.begin(), bytes.end());
      }
    }).IgnoreError();
    if (!reason.empty()) {
      parts.push_back(absl::StrCat("rank ", r, " of ", world_size_, " failed: ", reason));
    } else if (std::find(lost.begin(), lost.end(), r) != lost.end()) {
      parts.push_back(absl::StrCat("rank ", r, " of ", world_size_,
                                   " was lost: its heartbeat stopped (the process died or "
                                   "hangs)"));
    }
  }
  if (parts.empty()) {
    return absl::InternalError(
        absl::StrCat("rank ", rank_, " of ", world_size_, ": ", error, " (every rank is alive)"));
  }
  return absl::UnavailableError(absl::StrCat(absl::StrJoin(parts, "; "), here));
}

}  // namespace kd
