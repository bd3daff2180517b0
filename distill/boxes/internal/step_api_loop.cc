#include "distill/boxes/internal/step_api_loop.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "distill/boxes/box.h"
#include "distill/data/data_loader.h"

namespace kd {

double StepApiRun(const DistillConfig& config) {
  auto box = MakeBox(config, {.run_dir = "/tmp/libkd_box_benchmark_steps", .overwrite = true});
  auto fail = [](const absl::Status& status) {
    std::fprintf(stderr, "box_benchmark: %s\n", std::string(status.message()).c_str());
    std::exit(1);
  };
  if (!box.ok()) fail(box.status());
  Box& b = **box;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t epoch = b.start_epoch(); epoch < b.num_epochs(); ++epoch) {
    if (absl::Status s = b.PreEpoch(epoch); !s.ok()) fail(s);
    absl::StatusOr<DataLoader*> loader = b.TrainLoader();
    if (!loader.ok()) fail(loader.status());
    for (BatchStream batches(**loader); !batches.done();) {
      Batch batch = batches.Next();
      if (absl::Status s = b.PreForward(batch); !s.ok()) fail(s);
      absl::StatusOr<at::Tensor> loss = b.Forward(batch);
      if (!loss.ok()) fail(loss.status());
      if (absl::Status s = b.PostForward(*loss); !s.ok()) fail(s);
    }
    absl::StatusOr<std::map<std::string, double>> metrics = b.Evaluate();
    if (!metrics.ok()) fail(metrics.status());
    if (absl::Status s = b.PostEpoch(*metrics); !s.ok()) fail(s);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace kd
