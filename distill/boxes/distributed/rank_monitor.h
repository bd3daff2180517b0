// Which rank of a multi-process run was lost. When a rank dies (killed, crashed, its machine
// gone), the others see only their own collective fail: Gloo says "Connection reset by peer" or
// times out, naming an address at best. A RankMonitor gives each process a heartbeat in the
// run's rendezvous store (c10d's TCPStore, a connection of its own): a counter per rank that a
// background thread advances every `period`. When a collective fails, Explain reads the counters
// twice, a few periods apart, and names the ranks whose counter stood still, the ranks that said
// they failed (with their reason), or rank 0 when its store is gone with it.
//
//   KD_ASSIGN_OR_RETURN(auto group, kd::InitProcessGroup(env, device, timeout));
//   KD_ASSIGN_OR_RETURN(std::unique_ptr<kd::RankMonitor> monitor, kd::RankMonitor::Start(group));
//   absl::Status trained = Train(...);  // collectives on `group`, under kd::CallTorch
//   if (!trained.ok()) return monitor->Explain(trained.message());
//   // "rank 1 of 2 was lost: its heartbeat stopped (the process died or hangs); rank 0
//   //  stopped on: ... Connection reset by peer"
#ifndef LIBKD_DISTILL_BOXES_DISTRIBUTED_RANK_MONITOR_H_
#define LIBKD_DISTILL_BOXES_DISTRIBUTED_RANK_MONITOR_H_

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <c10/util/intrusive_ptr.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace c10d {
class ProcessGroup;
class Store;
}  // namespace c10d

namespace kd {

class RankMonitor {
 public:
  // Starts this rank's heartbeat in `group`'s store (a clone: its own connection), one beat
  // every `period`. FailedPrecondition when the group has no store.
  static absl::StatusOr<std::unique_ptr<RankMonitor>> Start(
      const c10::intrusive_ptr<c10d::ProcessGroup>& group,
      std::chrono::milliseconds period = std::chrono::milliseconds(200));
  // Stops the heartbeat (the other ranks then see this one as lost if they still wait for it).
  ~RankMonitor();
  RankMonitor(const RankMonitor&) = delete;
  RankMonitor& operator=(const RankMonitor&) = delete;

  // Records that this rank stopped on an error of its own (`reason`), so that the others name
  // it with its reason rather than as lost. Best effort: a store that is gone is ignored.
  void ReportFailure(absl::string_view reason);

  // The other ranks whose heartbeat stands still over four periods (sorted); when the store
  // itself is unreachable from here, {0}: rank 0 serves it. Blocks for those periods.
  std::vector<int> LostRanks();

  // An Unavailable status for `error` (what stopped this rank, a failed collective say) naming
  // the lost ranks and those that reported a failure; when every rank is alive and none
  // failed, Internal with `error` and "every rank is alive".
  absl::Status Explain(absl::string_view error);

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

 private:
  RankMonitor() = default;
  void Beat();
  // The beat counters of every rank, or empty when the store cannot be read.
  std::vector<int64_t> ReadBeats();

  c10::intrusive_ptr<c10d::Store> store_;   // the heartbeat thread's own connection
  c10::intrusive_ptr<c10d::Store> reader_;  // another, for LostRanks and ReportFailure
  int rank_ = 0;
  int world_size_ = 1;
  std::chrono::milliseconds period_{200};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool store_unreachable_ = false;  // at the last LostRanks
  std::thread thread_;
};

}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_DISTRIBUTED_RANK_MONITOR_H_
