// The profiler's cost on a training step, as ratios measured in one run (one thread, this
// thread's CPU time): a small MLP step (forward, loss, backward, SGD update, with the boxes'
// user scopes) with a kd::Profiler that is outside any window (its schedule still waiting) and
// inside an active window (recording shapes and memory, as the boxes' defaults do), each
// against the same step with no profiler. Blocks of steps alternate (none, profiled), the
// order flipping every pair; the median of the per-pair ratios is printed. Goal: outside a window at most 1.01.
//
//   bazel run -c opt //profiler:profiler_benchmark
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "profiler/profiler.h"

ABSL_FLAG(int, pairs, 41, "alternating (no profiler, profiler) blocks of steps");
ABSL_FLAG(int, steps, 100, "training steps in a block");

namespace kd {
namespace {

double ThreadSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Mlp {
  at::Tensor w1 = (at::randn({256, 512}) * 0.05).requires_grad_();
  at::Tensor w2 = (at::randn({512, 10}) * 0.05).requires_grad_();
  at::Tensor x = at::randn({64, 256});
  at::Tensor y = at::randint(0, 10, {64});

  void Step() {
    at::Tensor loss;
    {
      RECORD_USER_SCOPE("student_forward");
      loss = at::cross_entropy_loss(at::relu(x.mm(w1)).mm(w2), y);
    }
    {
      RECORD_USER_SCOPE("backward");
      loss.backward();
    }
    RECORD_USER_SCOPE("optimizer_step");
    at::NoGradGuard no_grad;
    for (at::Tensor* w : {&w1, &w2}) {
      w->sub_(w->grad(), 0.01);
      w->mutable_grad().zero_();
    }
  }
};

// Seconds of `steps` steps, stepping `profiler` (may be null) after each.
double Block(Mlp& mlp, Profiler* profiler, int steps) {
  const double start = ThreadSeconds();
  for (int i = 0; i < steps; ++i) {
    mlp.Step();
    if (profiler != nullptr && !profiler->Step().ok()) std::abort();
  }
  return ThreadSeconds() - start;
}

// The median of profiled / plain block times; `schedule` decides where the profiled steps are.
double PairedRatio(Mlp& mlp, const ProfilerSchedule& schedule, const std::string& dir) {
  const int steps = absl::GetFlag(FLAGS_steps);
  std::vector<double> ratios;
  for (int pair = -2; pair < absl::GetFlag(FLAGS_pairs); ++pair) {  // two warm-up pairs
    // Which block runs first alternates, so that an order effect cancels in the median.
    double plain = 0;
    if (pair % 2 == 0) plain = Block(mlp, nullptr, steps);
    std::unique_ptr<Profiler> profiler =
        *CreateProfiler({.output_dir = dir, .schedule = schedule});  // setup not timed
    const double profiled = Block(mlp, profiler.get(), steps);
    if (!profiler->Stop().ok()) std::abort();  // the trace is written here, not timed
    if (pair % 2 != 0) plain = Block(mlp, nullptr, steps);
    if (pair >= 0) ratios.push_back(profiled / plain);
  }
  return Median(ratios);
}

int Main() {
  at::set_num_threads(1);
  Mlp mlp;
  const std::string dir =
      (std::filesystem::temp_directory_path() / "libkd_profiler_benchmark").string();
  const int steps = absl::GetFlag(FLAGS_steps);
  // Outside: still waiting for its first window for the whole block.
  const double outside = PairedRatio(mlp, {.wait = 1000000, .warmup = 1, .active = 1}, dir);
  // Inside: recording from the first step to the last (the window ends after the block).
  const double inside =
      PairedRatio(mlp, {.wait = 0, .warmup = 0, .active = steps + 2, .repeat = 1}, dir);
  std::printf(
      "training step (MLP 256-512-10, batch 64), median of %d pairs of %d-step blocks, this "
      "thread's CPU time:\n  outside any window / no profiler = %.4f (goal: at most 1.01)\n"
      "  inside an active window / no profiler = %.4f\n",
      absl::GetFlag(FLAGS_pairs), steps, outside, inside);
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return kd::Main();
}
