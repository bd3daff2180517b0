#include "distill/boxes/testing/peer_rounds.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <utility>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "testing/ratio_reporter.h"

namespace kd {
namespace test {

std::string BatchSize::name() const { return absl::StrCat(batch, " x ", block); }
std::string BatchSize::file() const { return absl::StrCat(batch, "x", block); }

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double ProcessSeconds() {
  timespec now;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

absl::Status StartPeer(PeerProcess& peer, const std::string& script, int threads,
                       const std::string& log) {
  if (!peer.Start({.script = script,
                   .args = {absl::StrCat(threads), log},
                   .env = {PreloadTcmalloc(), absl::StrCat("OMP_NUM_THREADS=", threads)}})) {
    return absl::InternalError("the peer did not start (tools/install_deps.sh --peers)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> AskPeer(PeerProcess& peer, const std::string& request,
                                            size_t count, const std::string& log) {
  const std::optional<std::vector<double>> answer = peer.Ask(request);
  if (!answer.has_value() || answer->size() != count) {
    return absl::InternalError(
        absl::StrCat("the peer did not answer \"", request, "\" (its log: ", log,
                     "; is silverspoon-kd installed? tools/install_deps.sh --peers)"));
  }
  return *answer;
}

absl::Status WriteTokens(const std::string& path, int64_t count, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> id(0, static_cast<int>(vocab) - 1);
  std::vector<uint16_t> ids(count);
  for (uint16_t& v : ids) v = static_cast<uint16_t>(id(gen));  // x86: little-endian
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(ids.data()),
            static_cast<std::streamsize>(ids.size() * sizeof(uint16_t)));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("could not write the token file ", path));
  return absl::OkStatus();
}

int64_t NumParams(const Model& model) {
  int64_t n = 0;
  for (const auto& [name, p] : model.NamedParameters()) n += p.numel();
  return n;
}

absl::Status CheckSameModels(Box& box, const std::vector<double>& peer_params) {
  const int64_t teacher = NumParams(*box.teacher()), student = NumParams(box.student());
  if (peer_params.size() != 2 || teacher != static_cast<int64_t>(peer_params[0]) ||
      student != static_cast<int64_t>(peer_params[1])) {
    return absl::InternalError(absl::StrFormat(
        "the models differ: libkd's teacher has %d parameters and student %d, the peer's %d "
        "and %d",
        teacher, student, peer_params.empty() ? 0 : static_cast<int64_t>(peer_params[0]),
        peer_params.size() < 2 ? 0 : static_cast<int64_t>(peer_params[1])));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> FirstLosses(Box& box, int steps) {
  std::vector<double> losses;
  KD_RETURN_IF_ERROR(box.PreEpoch(0));
  KD_ASSIGN_OR_RETURN(DataLoader * loader, box.TrainLoader());
  for (BatchStream batches(*loader); !batches.done();) {
    if (static_cast<int>(losses.size()) == steps) break;
    Batch batch = batches.Next();
    KD_RETURN_IF_ERROR(box.PreForward(batch));
    KD_ASSIGN_OR_RETURN(at::Tensor loss, box.Forward(batch));
    losses.push_back(loss.item<double>());
    KD_RETURN_IF_ERROR(box.PostForward(loss));
  }
  return losses;
}

double MaxRelativeDifference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(std::abs(b[i]), 1e-12));
  }
  return worst;
}

std::string FormatLosses(const std::vector<double>& losses) {
  return absl::StrJoin(losses, " ", [](std::string* out, double v) {
    absl::StrAppend(out, absl::StrFormat("%.6f", v));
  });
}

double SpeedUp(const std::vector<double>& libkd, const std::vector<double>& other) {
  std::vector<double> ratios;
  for (size_t i = 0; i < libkd.size(); ++i) ratios.push_back(other[i] / libkd[i]);
  return Median(std::move(ratios));
}

absl::StatusOr<Rounds> RunPairedRounds(
    const DistillConfig& config, const std::string& run_dir, int pairs,
    const PeerRounds& peer_rounds, const std::function<void(const EpochReport&)>& on_timed_epoch) {
  Rounds libkd;
  absl::Status peer_status;
  double start_wall = 0, start_cpu = 0;
  auto on_epoch = [&](const EpochReport& report) {
    const double wall = WallSeconds() - start_wall, cpu = ProcessSeconds() - start_cpu;
    // The first epoch warms up (the stage's setup, first allocations), the last is not timed.
    if (!peer_status.ok() || report.epoch > 1 + pairs) return;
    const bool warmup = report.epoch == 1;
    if (!warmup) {
      libkd.wall.push_back(wall);
      libkd.cpu.push_back(cpu);
      if (on_timed_epoch) on_timed_epoch(report);
    }
    peer_status = peer_rounds(report.epoch, warmup);
    if (!peer_status.ok()) return;
    start_wall = WallSeconds();
    start_cpu = ProcessSeconds();
  };
  KD_ASSIGN_OR_RETURN(
      std::unique_ptr<Box> box,
      MakeBox(config, {.run_dir = run_dir, .overwrite = true, .on_epoch = on_epoch}));
  start_wall = WallSeconds();
  start_cpu = ProcessSeconds();
  KD_RETURN_IF_ERROR(box->Run().status());
  KD_RETURN_IF_ERROR(peer_status);
  return libkd;
}

}  // namespace test
}  // namespace kd
