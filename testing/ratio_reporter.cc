#include "testing/ratio_reporter.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "benchmark/benchmark.h"

namespace kd {
namespace test {
namespace {

class RatioReporter : public benchmark::ConsoleReporter {
 public:
  explicit RatioReporter(std::vector<Ratio> ratios) : ratios_(std::move(ratios)) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name == "median") {
        // CPU time in seconds: on a shared machine another process's load stretches real
        // time but not the CPU time of a single-threaded forward.
        medians_[run.run_name.function_name] =
            run.cpu_accumulated_time / static_cast<double>(run.iterations);
      }
    }
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\nRatios of median CPU times, measured in this run:\n");
    for (const Ratio& r : ratios_) {
      auto n = medians_.find(r.numerator), d = medians_.find(r.denominator);
      if (n == medians_.end() || d == medians_.end()) continue;
      std::printf("  %-40s / %-32s = %.4f\n", r.numerator.c_str(), r.denominator.c_str(),
                  n->second / d->second);
      if (r.derived) std::printf("    %s\n", r.derived(n->second, d->second).c_str());
    }
    std::fflush(stdout);
  }

 private:
  std::vector<Ratio> ratios_;
  std::map<std::string, double> medians_;
};

bool HasFlag(int argc, char** argv, const char* prefix) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix, std::strlen(prefix)) == 0) return true;
  }
  return false;
}

}  // namespace

double ThreadSeconds() {
  timespec now;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

namespace {

// Thread CPU seconds of each of `pairs` alternating runs (a b, b a, ...) after `warmup` pairs.
std::vector<std::pair<double, double>> PairedCpuSeconds(const std::function<void()>& a,
                                                        const std::function<void()>& b,
                                                        int pairs, int warmup) {
  auto cpu_seconds = [](const std::function<void()>& fn) {
    const double start = ThreadSeconds();
    fn();
    return ThreadSeconds() - start;
  };
  for (int i = 0; i < warmup; ++i) {
    a();
    b();
  }
  std::vector<std::pair<double, double>> times;
  for (int i = 0; i < pairs; ++i) {
    double ta, tb;
    if (i % 2 == 0) {
      ta = cpu_seconds(a);
      tb = cpu_seconds(b);
    } else {
      tb = cpu_seconds(b);
      ta = cpu_seconds(a);
    }
    times.emplace_back(ta, tb);
  }
  return times;
}

}  // namespace

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double MedianPairedRatio(const std::function<void()>& a, const std::function<void()>& b,
                         int pairs, int warmup) {
  std::vector<double> ratios;
  for (const auto& [ta, tb] : PairedCpuSeconds(a, b, pairs, warmup)) ratios.push_back(tb / ta);
  return Median(std::move(ratios));
}

double MedianPairedDifference(const std::function<void()>& a, const std::function<void()>& b,
                              int pairs, int warmup) {
  std::vector<double> differences;
  for (const auto& [ta, tb] : PairedCpuSeconds(a, b, pairs, warmup)) {
    differences.push_back(tb - ta);
  }
  return Median(std::move(differences));
}

int RunWithRatios(int argc, char** argv, const std::vector<Ratio>& ratios) {
  std::vector<char*> args(argv, argv + argc);
  std::string reps = "--benchmark_repetitions=10";
  std::string interleave = "--benchmark_enable_random_interleaving=true";
  std::string aggregates = "--benchmark_report_aggregates_only=true";
  if (!HasFlag(argc, argv, "--benchmark_repetitions")) args.push_back(reps.data());
  if (!HasFlag(argc, argv, "--benchmark_enable_random_interleaving")) {
    args.push_back(interleave.data());
  }
  if (!HasFlag(argc, argv, "--benchmark_report_aggregates_only")) {
    args.push_back(aggregates.data());
  }
  int new_argc = static_cast<int>(args.size());
  benchmark::Initialize(&new_argc, args.data());
  if (benchmark::ReportUnrecognizedArguments(new_argc, args.data())) return 1;
  RatioReporter reporter(ratios);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}

}  // namespace test
}  // namespace kd
