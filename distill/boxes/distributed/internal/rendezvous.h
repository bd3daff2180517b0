// The rendezvous's pieces (distill/boxes/ddp.cc, InitProcessGroup): one deadline for all of
// it, the master's address resolved and reached with the cause of a failure named, and
// libtorch's logs quiet meanwhile.
#ifndef LIBKD_DISTILL_BOXES_DISTRIBUTED_INTERNAL_RENDEZVOUS_H_
#define LIBKD_DISTILL_BOXES_DISTRIBUTED_INTERNAL_RENDEZVOUS_H_

#include <sys/socket.h>

#include <chrono>
#include <string>

#include "absl/status/statusor.h"

namespace kd {
namespace distributed_internal {

// A point in time a rendezvous must be done by.
class Deadline {
 public:
  explicit Deadline(std::chrono::milliseconds timeout)
      : end_(std::chrono::steady_clock::now() + timeout) {}
  // What is left, at least 1 ms (libtorch reads 0 as "no timeout").
  std::chrono::milliseconds Left() const {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        end_ - std::chrono::steady_clock::now()));
  }
  bool Passed() const { return std::chrono::steady_clock::now() >= end_; }

 private:
  std::chrono::steady_clock::time_point end_;
};

// `host`'s first address (IPv4 preferred, as libtorch's store tries), or Unavailable naming
// the host and the resolver's reason.
absl::StatusOr<sockaddr_storage> Resolve(const std::string& host, int port);

// Connects to `address` until it answers or the deadline passes; 0, or the last errno.
int ReachBefore(const sockaddr_storage& address, const Deadline& deadline);

// The words for a connect's errno: "nothing listens there (connection refused)", ...
std::string ConnectCause(int err);

// Raises libtorch's log level to errors for its lifetime.
class QuietTorchLogs {
 public:
  QuietTorchLogs();
  ~QuietTorchLogs();
  QuietTorchLogs(const QuietTorchLogs&) = delete;
  QuietTorchLogs& operator=(const QuietTorchLogs&) = delete;

 private:
  int saved_;
};

}  // namespace distributed_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_DISTRIBUTED_INTERNAL_RENDEZVOUS_H_
