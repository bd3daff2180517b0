// What the side-by-side benchmarks against a Python peer (lm_kd_benchmark: silverspoon-kd's
// ResponseBasedDistiller; feature_kd_benchmark: its BlockwiseDistiller) share: the peer's
// process (tcmalloc by LD_PRELOAD, the same intra-op threads), its answers, the token file both
// sides read, the first steps' losses that must agree before timing, and the paired rounds: a
// box Run()s one epoch per round and, between its epochs, the peer runs its rounds, so both
// sides see the same machine state.
//
//   test::PeerProcess peer;
//   KD_RETURN_IF_ERROR(test::StartPeer(peer, "distill/boxes/peer_x.py", threads, log));
//   KD_ASSIGN_OR_RETURN(std::vector<double> t, test::AskPeer(peer, "round ...", 2, log));
//   KD_ASSIGN_OR_RETURN(test::Rounds libkd, test::RunPairedRounds(
//       config, run_dir, pairs, [&](int64_t epoch, bool warmup) { ...AskPeer... }));
//   double speed_up = test::SpeedUp(libkd.wall, peer_rounds.wall);
//
// Errors: what fails (the peer's answer, writing a file, the box) comes back as a status
// naming it; a peer that does not answer is named with its log.
#ifndef LIBKD_DISTILL_BOXES_TESTING_PEER_ROUNDS_H_
#define LIBKD_DISTILL_BOXES_TESTING_PEER_ROUNDS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "distill/boxes/box.h"
#include "distill/boxes/box_options.h"
#include "distill/config/distill_config.pb.h"
#include "testing/peer_process.h"

namespace kd {
namespace test {

// A batch of `batch` windows of `block` tokens.
struct BatchSize {
  int64_t batch, block;
  std::string name() const;  // "8 x 128"
  std::string file() const;  // "8x128", for file names
};

// Seconds of each timed round of one side.
struct Rounds {
  std::vector<double> wall, cpu;
};

// The monotonic clock, and this process's CPU time (every thread's: a loader's or the teacher's
// thread included), in seconds.
double WallSeconds();
double ProcessSeconds();

// Starts `script` (relative to bazel run's folder) with arguments THREADS and LOG, tcmalloc
// LD_PRELOADed and OMP_NUM_THREADS = `threads`.
absl::Status StartPeer(PeerProcess& peer, const std::string& script, int threads,
                       const std::string& log);

// The numbers of the peer's answer to `request`, exactly `count` of them, or an error naming
// the request and the peer's `log`.
absl::StatusOr<std::vector<double>> AskPeer(PeerProcess& peer, const std::string& request,
                                            size_t count, const std::string& log);

// `count` random ids below `vocab` (seeded by `seed`) as a flat little-endian uint16 file, as
// libkd's "token_file" reads it.
absl::Status WriteTokens(const std::string& path, int64_t count, int64_t vocab, uint32_t seed);

// The number of `model`'s parameter values.
int64_t NumParams(const Model& model);

// OK if `box`'s teacher and student have peer_params[0] and peer_params[1] parameter values (the
// peer's "models" answer), else an error giving both sides' counts.
absl::Status CheckSameModels(Box& box, const std::vector<double>& peer_params);

// The total loss of each of the first `steps` steps of a fresh box, driven by its step API.
absl::StatusOr<std::vector<double>> FirstLosses(Box& box, int steps);

// The largest |a[i] - b[i]| / |b[i]|; `a` and `b` have the same size.
double MaxRelativeDifference(const std::vector<double>& a, const std::vector<double>& b);

// "l1 l2 ..." with 6 decimals.
std::string FormatLosses(const std::vector<double>& losses);

// The median over pairs of other[i] / libkd[i] (seconds): libkd's speed-up.
double SpeedUp(const std::vector<double>& libkd, const std::vector<double>& other);

// Called after each of a run's epochs 1 (the warm-up: `warmup`, its times not kept) to
// 1 + pairs, to run the peer's rounds.
using PeerRounds = std::function<absl::Status(int64_t epoch, bool warmup)>;

// Runs `config` (its stage's num_epochs = 2 + `pairs`) in a box in `run_dir` (replaced), one
// epoch a round: a warm-up epoch, `pairs` timed ones, and a last one left untimed (the run's
// end: the peer's end of its loop is not timed either). After each of the first 1 + `pairs`
// epochs `peer_rounds` runs; libkd's epoch is timed from the end of one call to the start of
// the next, so its batch loading and per-epoch work count against it. `on_timed_epoch` (if
// set) sees each timed epoch's report. libkd's timed rounds, or the first error.
absl::StatusOr<Rounds> RunPairedRounds(
    const DistillConfig& config, const std::string& run_dir, int pairs,
    const PeerRounds& peer_rounds,
    const std::function<void(const EpochReport&)>& on_timed_epoch = nullptr);

}  // namespace test
}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_TESTING_PEER_ROUNDS_H_
