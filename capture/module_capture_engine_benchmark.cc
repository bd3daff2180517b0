// Truncated capture vs the full forward on a TorchScript ResNet-18 (1x3x224x224, generated on
// first use): speed-ups measured in this run against the ideal speed-up given by the FLOPs up
// to each cut, and against the time-ideal (the share of a full forward's time spent up to the
// cut, timed with taps); and the peak-memory saving of capture_inputs = false.
//
//   OMP_WAIT_POLICY=ACTIVE bazel run -c opt //capture:module_capture_engine_benchmark
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <numeric>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/Parallel.h>

#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "capture/module_capture_engine.h"
#include "hooks/torchscript_model.h"
#include "memdiag/tracking_allocator.h"
#include "testing/bench_models.h"
#include "testing/ratio_reporter.h"

namespace kd {
namespace {

const std::vector<std::string> kCuts = {"layer1", "layer2", "layer3"};

// Batch 1, as in the hook benchmark. (FLOPs are a rough guide to time either way: at batch 1
// layer4's 33 MB of weights make it memory-bound, so FLOPs understate its time; at batch 8
// the large early activations do the same for the stem and layer1.)
constexpr int64_t kBatch = 1;

void Check(const absl::Status& status) {
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
    std::exit(2);
  }
}

// Multiply-accumulates x 2 of every Conv2d and Linear call, in call order, and the position
// of each cut module's call in that order: FLOPs up to a cut = the sum before its position.
struct FlopCount {
  std::vector<double> flops;         // per conv/linear call, in call order
  std::map<std::string, size_t> cut_at;  // cut path -> number of conv/linear calls before it ends
  double total() const { return std::accumulate(flops.begin(), flops.end(), 0.0); }
  double upto(const std::string& cut) const {
    return std::accumulate(flops.begin(), flops.begin() + cut_at.at(cut), 0.0);
  }
};

FlopCount CountFlops(Model& model, const at::Tensor& input) {
  FlopCount count;
  std::map<std::string, at::Tensor> weights;
  for (auto& [name, p] : model.NamedParameters()) weights[name] = p;
  std::vector<HookHandle> taps;
  for (const ModuleInfo& m : model.NamedModules()) {
    if (m.type == "Conv2d" || m.type == "Linear") {
      const at::Tensor w = weights.at(m.path + ".weight");
      taps.push_back(*model.AddHook(m.path, [&count, w, type = m.type](
                                               const std::vector<c10::IValue>&,
                                               const c10::IValue& output) {
        const at::Tensor out = output.toTensor();
        // Conv2d: out elements x (Cin/groups x kh x kw); Linear: out elements x in features.
        const double macs = type == "Conv2d"
                                ? static_cast<double>(out.numel()) * w.size(1) * w.size(2) * w.size(3)
                                : static_cast<double>(out.numel()) * w.size(1);
        count.flops.push_back(2 * macs);
      }));
    }
  }
  for (const std::string& cut : kCuts) {
    taps.push_back(*model.AddHook(cut, [&count, cut](const std::vector<c10::IValue>&,
                                                    const c10::IValue&) {
      count.cut_at[cut] = count.flops.size();
    }));
  }
  at::NoGradGuard no_grad;
  model.Forward({input});
  return count;
}

// The fraction of a full forward's time spent up to the end of each cut module's call, from
// taps that note the time: median of `rounds` forwards. 1 / fraction is the speed-up a cut
// there can reach if it removes exactly the rest and adds nothing.
std::map<std::string, double> TimeFractions(Model& model, const at::Tensor& input, int rounds) {
  using Clock = std::chrono::steady_clock;
  std::map<std::string, Clock::time_point> reached;
  std::vector<HookHandle> taps;
  for (const std::string& cut : kCuts) {
    taps.push_back(*model.AddHook(cut, [&reached, cut](const std::vector<c10::IValue>&,
                                                      const c10::IValue&) {
      reached[cut] = Clock::now();
    }));
  }
  at::NoGradGuard no_grad;
  for (int i = 0; i < 3; ++i) model.Forward({input});  // warm-up
  std::map<std::string, std::vector<double>> fractions;
  for (int i = 0; i < rounds; ++i) {
    const Clock::time_point start = Clock::now();
    model.Forward({input});
    const double total = std::chrono::duration<double>(Clock::now() - start).count();
    for (const std::string& cut : kCuts) {
      fractions[cut].push_back(std::chrono::duration<double>(reached[cut] - start).count() /
                               total);
    }
  }
  std::map<std::string, double> medians;
  for (auto& [cut, values] : fractions) {
    std::sort(values.begin(), values.end());
    medians[cut] = values[values.size() / 2];
  }
  return medians;
}

// Peak bytes above the start of a truncated capture of layer1, layer2, layer3 (cut after
// layer3), and the bytes the captures still hold afterwards.
std::pair<int64_t, int64_t> CaptureMemory(Model& model, const at::Tensor& input,
                                          bool capture_inputs) {
  TrackingAllocator& tracker = TrackingAllocator::Install();
  ModuleCaptureEngine engine(model, kCuts,
                             {.capture_inputs = capture_inputs, .auto_truncate = true});
  Check(engine.Register());
  at::NoGradGuard no_grad;
  Check(engine.Forward({input}).status());  // builds the cut graph
  engine.ClearCaptured();
  tracker.ResetPeak();
  Check(engine.Forward({input}).status());
  const int64_t peak = tracker.peak_bytes() - tracker.baseline_bytes();
  const int64_t held = tracker.live_bytes() - tracker.baseline_bytes();
  return {peak, held};
}

int Main(int argc, char** argv) {
  at::set_num_threads(1);
  TrackingAllocator::Install();  // before any tensor, so that every activation is seen
  absl::StatusOr<std::string> path = test::GeneratedResNet18();
  Check(path.status());
  const at::Tensor input = at::randn({kBatch, 3, 224, 224});

  std::shared_ptr<Model> full = test::LoadTorchScriptOrDie(*path);
  benchmark::RegisterBenchmark("full/resnet18", [full, input](benchmark::State& state) {
    at::NoGradGuard no_grad;
    for (auto _ : state) benchmark::DoNotOptimize(full->Forward({input}));
  })->Unit(benchmark::kMillisecond)->UseRealTime();

  std::vector<test::Ratio> ratios;
  std::shared_ptr<Model> flop_model = test::LoadTorchScriptOrDie(*path);
  const FlopCount flops = CountFlops(*flop_model, input);
  std::printf("ResNet-18 FLOPs (2 x multiply-accumulates of Conv2d and Linear): %.3f G\n",
              flops.total() / 1e9);
  const std::map<std::string, double> fractions = TimeFractions(*flop_model, input, 15);
  for (const std::string& cut : kCuts) {
    std::shared_ptr<Model> model = test::LoadTorchScriptOrDie(*path);
    auto engine = std::make_shared<ModuleCaptureEngine>(*model, std::vector<std::string>{cut},
                                                        CaptureOptions{.auto_truncate = true});
    Check(engine->Register());
    const std::string name = "truncated_after_" + cut + "/resnet18";
    benchmark::RegisterBenchmark(name.c_str(), [model, engine, input](benchmark::State& state) {
      at::NoGradGuard no_grad;
      for (auto _ : state) {
        engine->ClearCaptured();
        benchmark::DoNotOptimize(engine->Forward({input}));
      }
    })->Unit(benchmark::kMillisecond)->UseRealTime();
    const double ideal = flops.total() / flops.upto(cut);
    const double time_ideal = 1 / fractions.at(cut);
    std::printf(
        "  up to %-7s %.3f GFLOPs: ideal speed-up %.3fx; %.1f%% of a full forward's time: "
        "time-ideal speed-up %.3fx\n",
        cut.c_str(), flops.upto(cut) / 1e9, ideal, 100 * fractions.at(cut), time_ideal);
    ratios.push_back({"full/resnet18", name, [ideal, time_ideal](double full_s, double cut_s) {
                        const double measured = full_s / cut_s;
                        return absl::StrFormat(
                            "speed-up %.3fx, ideal (FLOPs) %.3fx: measured/ideal = %.3f "
                            "(target: within 15%%); time-ideal %.3fx: measured/time-ideal = "
                            "%.3f",
                            measured, ideal, measured / ideal, time_ideal,
                            measured / time_ideal);
                      }});
  }

  std::shared_ptr<Model> memory_model = test::LoadTorchScriptOrDie(*path);
  const auto [peak_in, held_in] = CaptureMemory(*memory_model, input, true);
  const auto [peak_out, held_out] = CaptureMemory(*memory_model, input, false);
  std::printf(
      "Peak memory of a truncated capture of layer1..layer3 (above the start), and bytes the "
      "captures hold after it:\n"
      "  capture_inputs = true:  peak %.2f MB, held %.2f MB\n"
      "  capture_inputs = false: peak %.2f MB, held %.2f MB\n"
      "  saving: peak %.1f%%, held %.1f%%\n\n",
      peak_in / 1e6, held_in / 1e6, peak_out / 1e6, held_out / 1e6,
      100.0 * (peak_in - peak_out) / peak_in, 100.0 * (held_in - held_out) / held_in);
  return test::RunWithRatios(argc, argv, ratios);
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) { return kd::Main(argc, argv); }
