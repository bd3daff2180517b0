// Writes traces for profiler_trace_test: 6 steps of a small two-phase loop under
// CreateProfiler(wait 1, warmup 1, active 2, repeat 2) into argv[1].
#include <iostream>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include "profiler/profiler.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: write_profile DIR\n";
    return 2;
  }
  at::set_num_threads(1);
  absl::StatusOr<std::unique_ptr<kd::Profiler>> profiler = kd::CreateProfiler(
      {.output_dir = argv[1], .schedule = {.wait = 1, .warmup = 1, .active = 2, .repeat = 2}});
  if (!profiler.ok()) {
    std::cerr << profiler.status().message() << "\n";
    return 1;
  }
  at::Tensor x = at::randn({32, 32});
  for (int step = 0; step < 8; ++step) {
    {
      RECORD_USER_SCOPE("student_forward");
      x = at::mm(x, x).tanh();
    }
    {
      RECORD_USER_SCOPE("loss");
      (void)x.sum();
    }
    if (absl::Status s = (*profiler)->Step(); !s.ok()) {
      std::cerr << s.message() << "\n";
      return 1;
    }
  }
  if (absl::Status s = (*profiler)->Stop(); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 1;
  }
  for (const std::string& path : (*profiler)->traces()) std::cout << path << "\n";
  return 0;
}
