#include "distill/boxes/distributed/internal/rendezvous.h"

#include <netdb.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include <c10/util/Logging.h>

#include "absl/strings/str_cat.h"

namespace kd {
namespace distributed_internal {

// `host`'s first address (IPv4 preferred, as libtorch's store tries), or Unavailable naming
// the host and the resolver's reason.
absl::StatusOr<sockaddr_storage> Resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "MASTER_ADDR=", host,
        " cannot be resolved: ", rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc),
        " (give rank 0's host name or address)"));
  }
  const addrinfo* chosen = found;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      chosen = a;
      break;
    }
  }
  sockaddr_storage address{};
  std::memcpy(&address, chosen->ai_addr, chosen->ai_addrlen);
  ::freeaddrinfo(found);
  return address;
}

// Connects to `address` until it answers or the deadline passes; 0, or the last errno.
int ReachBefore(const sockaddr_storage& address, const Deadline& deadline) {
  const socklen_t length =
      address.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  int last = ETIMEDOUT;
  while (true) {
    const int fd = ::socket(address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno;
    int err = 0;
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        const int wait_ms = static_cast<int>(std::min<int64_t>(deadline.Left().count(), 1000));
        if (::poll(&p, 1, wait_ms) == 1) {
          socklen_t size = sizeof(err);
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &size);
        } else {
          err = ETIMEDOUT;
        }
      }
    }
    ::close(fd);
    if (err == 0) return 0;
    last = err;
    if (deadline.Passed()) return last;
    std::this_thread::sleep_for(std::min(std::chrono::milliseconds(100), deadline.Left()));
  }
}

std::string ConnectCause(int err) {
  switch (err) {
    case ECONNREFUSED:
      return "nothing listens there (connection refused)";
    case ETIMEDOUT:
      return "no answer (timed out)";
    case EHOSTUNREACH:
    case ENETUNREACH:
      return absl::StrCat("no route to the host (", std::strerror(err), ")");
    default:
      return std::strerror(err);
  }
}

QuietTorchLogs::QuietTorchLogs() : saved_(FLAGS_caffe2_log_level) { FLAGS_caffe2_log_level = 2; }
QuietTorchLogs::~QuietTorchLogs() { FLAGS_caffe2_log_level = saved_; }

}  // namespace distributed_internal
}  // namespace kd
