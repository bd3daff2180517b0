// Writes a CPU allocation-history snapshot of a small loop to argv[1] for
// memory_history_test: 3 batches in scope "eval", each allocating a (64, 64)
// float tensor (16384 bytes) that is kept, and a temporary that is freed; one
// tensor stays live from before.
#include <iostream>
#include <vector>

#include <ATen/ATen.h>

#include "memdiag/memory_history.h"
#include "memdiag/tracking_allocator.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: write_memory_snapshot OUT.pickle\n";
    return 2;
  }
  kd::TrackingAllocator::Install();
  std::vector<at::Tensor> kept;
  {
    kd::RecordMemoryHistory history(argv[1]);
    for (int step = 0; step < 3; ++step) {
      kd::ScopedMemoryAnnotation scope("eval", step);
      at::Tensor temporary = at::ones({64, 64});
      kept.push_back(temporary * 2);
    }
    if (absl::Status done = history.Finish(); !done.ok()) {
      std::cerr << done.message() << "\n";
      return 1;
    }
  }
  return 0;
}
