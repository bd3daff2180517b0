// A peer's Python process (torchdistill's, silverspoon-kd's, torch's own code, in libkd's
// virtual environment) serving measurements to a benchmark over pipes: one request line in,
// one answer line out, so the peer's runs interleave with libkd's in one run and both sides
// see the same machine state.
//
//   kd::test::PeerProcess peer;
//   if (!peer.Start({.script = "hooks/peer_hook_timing.py"})) ...  // from bazel run's folder
//   std::optional<std::vector<double>> answer = peer.Ask("time chain5 1 0 1000");
//   // the script answered "time 5.7e-05": {5.7e-05}
#ifndef LIBKD_TESTING_PEER_PROCESS_H_
#define LIBKD_TESTING_PEER_PROCESS_H_

#include <sys/types.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace kd {
namespace test {

// Debian's tcmalloc, for a peer's LD_PRELOAD: libkd's binaries link tcmalloc (//tools:distill),
// and a like-for-like peer runs on it too.
inline constexpr char kTcmallocLibrary[] = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4";
// Whether this process runs on tcmalloc (linked in: it exports tc_malloc), else the C library's.
bool LinkedWithTcmalloc();
// "tcmalloc" or "glibc": the malloc this process runs on.
inline const char* MallocName() { return LinkedWithTcmalloc() ? "tcmalloc" : "glibc"; }
// "LD_PRELOAD=" kTcmallocLibrary: PeerProcess::Options::env's entry that runs the peer on it.
std::string PreloadTcmalloc();

class PeerProcess {
 public:
  struct Options {
    // The Python: bazel run's working folder is the main repository's runfiles, and @libtorch's
    // (with the virtual environment's python.sh) are beside it.
    std::string python = "../libtorch/python.sh";
    // The script, relative to the working folder, and its arguments.
    std::string script;
    std::vector<std::string> args;
    // NAME=VALUE pairs added to the script's environment (LD_PRELOAD=...).
    std::vector<std::string> env;
  };

  PeerProcess() = default;
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;
  // Closes the script's input (it exits at the end of its input) and waits for it.
  ~PeerProcess();

  // Starts the script; false if it could not be started.
  bool Start(const Options& options);

  // The numbers of the answer to `request`: the answer's first word must be the request's, the
  // others numbers. nullopt when the script is gone or answered otherwise ("-" for "I have no
  // such thing" is otherwise).
  std::optional<std::vector<double>> Ask(const std::string& request);

 private:
  pid_t pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
};

}  // namespace test
}  // namespace kd

#endif  // LIBKD_TESTING_PEER_PROCESS_H_
