// A process-function call through the registry (a ProcFunc built by key) against a direct call
// of the same function: the cost of the std::function, the kwargs handling and the exception
// guard.
//
//   OMP_WAIT_POLICY=ACTIVE bazel run -c opt //distill/procs:proc_func_benchmark --
//     --benchmark_repetitions=10 --benchmark_enable_random_interleaving=true
//     --benchmark_report_aggregates_only=true                  (one command line)
#include <memory>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "benchmark/benchmark.h"
#include "distill/procs/default_procs.h"
#include "distill/procs/forward_procs.h"
#include "distill/procs/proc_func.h"
#include "distill/procs/testing/fake_training_context.h"
#include "testing/fixture_models.h"

namespace kd {
namespace {

// The cheapest process function: the default pre-forward process does nothing, so the
// registry's overhead is all there is to measure.
void BM_NoOpDirect(benchmark::State& state) {
  test::FakeTrainingContext box(/*with_teacher=*/true);
  Batch batch;
  const Kwargs kwargs;
  for (auto _ : state) {
    benchmark::DoNotOptimize(DefaultPreForwardProcess(box, batch, kwargs));
  }
}
BENCHMARK(BM_NoOpDirect);

void BM_NoOpThroughRegistry(benchmark::State& state) {
  test::FakeTrainingContext box(/*with_teacher=*/true);
  Batch batch;
  ProcFunc<PreForwardProc> proc = *BuildProcFunc<PreForwardProc>("default_pre_forward_process");
  for (auto _ : state) {
    benchmark::DoNotOptimize(proc(box, batch));
  }
}
BENCHMARK(BM_NoOpThroughRegistry);

// Config kwargs overridden at the call: the merge copies a map per call.
void BM_NoOpThroughRegistryMergingKwargs(benchmark::State& state) {
  test::FakeTrainingContext box(/*with_teacher=*/true);
  Batch batch;
  ProcFunc<PreForwardProc> proc = *BuildProcFunc<PreForwardProc>(
      "bench_any_kwargs", {{"factor", 0.5}, {"mode", std::string("a")}});
  const Kwargs call_kwargs = {{"factor", 2.0}};
  for (auto _ : state) {
    benchmark::DoNotOptimize(proc(box, batch, call_kwargs));
  }
}
BENCHMARK(BM_NoOpThroughRegistryMergingKwargs);

// Looking the key up on every call (what a box should not do).
void BM_NoOpLookupEveryCall(benchmark::State& state) {
  test::FakeTrainingContext box(/*with_teacher=*/true);
  Batch batch;
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        (*BuildProcFunc<PreForwardProc>("default_pre_forward_process"))(box, batch));
  }
}
BENCHMARK(BM_NoOpLookupEveryCall);

// A real forward process: small_cnn (TorchScript) on a 2x1x28x28 batch.
std::unique_ptr<Model> SmallCnn() { return test::TorchScriptFixture("small_cnn"); }

void BM_ForwardBatchOnlyDirect(benchmark::State& state) {
  std::unique_ptr<Model> model = SmallCnn();
  at::NoGradGuard no_grad;
  Batch batch{at::randn({2, 1, 28, 28}), c10::IValue(), c10::IValue()};
  const Kwargs kwargs;
  for (auto _ : state) {
    benchmark::DoNotOptimize(ForwardBatchOnly(*model, batch, kwargs));
  }
}
BENCHMARK(BM_ForwardBatchOnlyDirect);

void BM_ForwardBatchOnlyThroughRegistry(benchmark::State& state) {
  std::unique_ptr<Model> model = SmallCnn();
  at::NoGradGuard no_grad;
  Batch batch{at::randn({2, 1, 28, 28}), c10::IValue(), c10::IValue()};
  ProcFunc<ForwardProc> proc = *BuildProcFunc<ForwardProc>("forward_batch_only");
  for (auto _ : state) {
    benchmark::DoNotOptimize(proc(*model, batch));
  }
}
BENCHMARK(BM_ForwardBatchOnlyThroughRegistry);

}  // namespace

// A no-op that accepts any kwargs, for the merging case.
KD_REGISTER_PROC_FUNC(PreForwardProc, "bench_any_kwargs", DefaultPreForwardProcess, kAnyKwargs);

}  // namespace kd
