// Training-step cost of the registered models: forward + cross-entropy + backward of one batch.
//
//   bazel run -c opt //distill/models:models_benchmark
//
// BM_FashionCnnStep/<width>/<threads>: a batch of 128 1x28x28 images through fashion_cnn.
#include <cstdint>
#include <memory>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "benchmark/benchmark.h"
#include "distill/models/model_registry.h"
#include "hooks/model.h"

namespace kd {
namespace {

void BM_FashionCnnStep(benchmark::State& state) {
  at::set_num_threads(static_cast<int>(state.range(1)));
  at::manual_seed(0);
  absl::StatusOr<std::unique_ptr<Model>> model =
      MakeRegisteredModel("fashion_cnn", {{"width", state.range(0)}});
  if (!model.ok()) {
    state.SkipWithError(std::string(model.status().message()).c_str());
    return;
  }
  const at::Tensor x = at::randn({128, 1, 28, 28});
  const at::Tensor y = at::randint(10, {128});
  for (auto _ : state) {
    at::Tensor logits = (*model)->Forward({x}).toTensor();
    at::Tensor loss = at::cross_entropy_loss(logits, y);
    loss.backward();
    for (auto& [name, p] : (*model)->NamedParameters()) p.mutable_grad().reset();
    benchmark::DoNotOptimize(loss);
  }
  state.counters["params"] = static_cast<double>((*model)->NumParameters());
}
BENCHMARK(BM_FashionCnnStep)
    ->ArgNames({"width", "threads"})
    ->Args({16, 1})
    ->Args({4, 1})
    ->Args({16, 2})
    ->Args({4, 2})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);

}  // namespace
}  // namespace kd
