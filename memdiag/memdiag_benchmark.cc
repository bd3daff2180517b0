// memdiag's costs as ratios measured in one run (one thread):
//  1. the tracking allocator's allocate + free against c10's default CPU allocator, the same
//     sizes, alternating batches: ns per pair more and the ratio (goal: at most 50 ns more);
//  2. a storage inventory of 100,000 live tensors held in a registered list (goal: at most
//     20 ms), and with --peers silverspoon-kd's collect_storage_inventory over 100,000 live
//     tensors in Python (include_cpu=True, force_gc=False), side by side.
//
//   bazel run -c opt //memdiag:memdiag_benchmark -- --peers
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/CPUAllocator.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "memdiag/inventory.h"
#include "memdiag/tracking_allocator.h"

ABSL_FLAG(int, pairs, 21, "alternating (c10, tracking) batches of allocations timed");
ABSL_FLAG(int, allocations, 200000, "allocate + free pairs in a batch");
ABSL_FLAG(int, tensors, 100000, "live tensors in the inventory benchmark");
ABSL_FLAG(bool, peers, false, "also time silverspoon-kd's collect_storage_inventory");

namespace kd {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds for `n` allocate + free pairs of sizes cycling over a few tensor-like
// sizes.
double AllocFree(c10::Allocator* allocator, int n) {
  static constexpr std::array<size_t, 4> kSizes = {64, 512, 4096, 256};
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < n; ++i) {
    c10::DataPtr p = allocator->allocate(kSizes[i & 3]);
    if (p.get() == nullptr) std::abort();
  }
  return Seconds(start);
}

void AllocatorCost() {
  c10::Allocator* plain = c10::GetDefaultCPUAllocator();
  c10::Allocator* tracking = &TrackingAllocator::Install();
  const int n = absl::GetFlag(FLAGS_allocations);
  AllocFree(plain, n);
  AllocFree(tracking, n);
  std::vector<double> extra_ns, ratios;
  for (int pair = 0; pair < absl::GetFlag(FLAGS_pairs); ++pair) {
    const double a = AllocFree(plain, n), b = AllocFree(tracking, n);
    extra_ns.push_back((b - a) / n * 1e9);
    ratios.push_back(b / a);
  }
  const double base_ns = AllocFree(plain, n) / n * 1e9;
  std::printf(
      "allocate+free: c10 %.1f ns, tracking +%.1f ns (ratio %.2f), median of "
      "%zu pairs of %d "
      "(goal: at most +50 ns)\n",
      base_ns, Median(extra_ns), Median(ratios), extra_ns.size(), n);
}

double PeerInventorySeconds(int tensors) {
  const std::string command =
      absl::StrCat("../libtorch/python.sh memdiag/peer_inventory_timing.py ", tensors, " 5");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  double seconds = -1;
  if (std::fscanf(pipe, "%lf", &seconds) != 1) seconds = -1;
  pclose(pipe);
  return seconds;
}

void InventoryCost() {
  const int n = absl::GetFlag(FLAGS_tensors);
  std::vector<at::Tensor> held;
  held.reserve(n);
  for (int i = 0; i < n; ++i) held.push_back(at::empty({4}));
  MemoryRoots roots;
  roots.AddTensors("held", &held);
  std::vector<double> times, faults, kernel_ms;
  size_t found = 0;
  for (int run = 0; run < 5; ++run) {
    rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    const Clock::time_point start = Clock::now();
    found = CollectStorageInventory(roots).size();
    times.push_back(Seconds(start));
    getrusage(RUSAGE_SELF, &after);
    faults.push_back(static_cast<double>(after.ru_minflt - before.ru_minflt));
    kernel_ms.push_back((after.ru_stime.tv_sec - before.ru_stime.tv_sec) * 1e3 +
                        (after.ru_stime.tv_usec - before.ru_stime.tv_usec) / 1e3);
  }
  const double ours = Median(times);
  std::printf(
      "storage inventory of %d tensors: libkd %.1f ms (%zu storages; goal: at most 20 ms)\n", n,
      ours * 1e3, found);
  // Where the time goes: the roots' walk alone, and the inventory without the allocator's.
  std::vector<double> walk, rooted;
  for (int run = 0; run < 5; ++run) {
    Clock::time_point start = Clock::now();
    int64_t visited = 0;
    roots.Visit([&](const std::string&, const at::Tensor&) { ++visited; });
    walk.push_back(Seconds(start));
    start = Clock::now();
    found = CollectStorageInventory(roots, {.include_unowned = false}).size();
    rooted.push_back(Seconds(start));
  }
  std::printf(
      "  of which: walking the roots %.1f ms; page faults %.0f (%.1f ms in the kernel); "
      "without the allocator's unowned %.1f ms\n",
      Median(walk) * 1e3, Median(faults), Median(kernel_ms), Median(rooted) * 1e3);
  if (absl::GetFlag(FLAGS_peers)) {
    const double theirs = PeerInventorySeconds(n);
    if (theirs < 0) {
      std::printf(
          "silverspoon-kd: not run (tools/install_deps.sh --peers installs "
          "it)\n");
    } else {
      std::printf(
          "silverspoon-kd collect_storage_inventory: %.1f ms; libkd is %.1fx "
          "faster\n",
          theirs * 1e3, theirs / ours);
    }
  }
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  at::set_num_threads(1);
  kd::AllocatorCost();
  kd::InventoryCost();
  return 0;
}
