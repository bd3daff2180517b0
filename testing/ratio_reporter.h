// A Google Benchmark console reporter that also prints ratios of medians measured in the same
// run, and a main() helper that interleaves repetitions (the machines are noisy: compare
// variants A B A B ..., report medians and ratios, never absolute times).
//
//   int main(int argc, char** argv) {
//     ... benchmark::RegisterBenchmark("plain/resnet18", ...); ...
//     return kd::test::RunWithRatios(argc, argv, {{"hooked/resnet18", "plain/resnet18"}});
//   }
#ifndef LIBKD_TESTING_RATIO_REPORTER_H_
#define LIBKD_TESTING_RATIO_REPORTER_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace kd {
namespace test {

struct Ratio {
  std::string numerator;    // benchmark name
  std::string denominator;  // benchmark name (the baseline)
  // Optional: prints a derived line from the two median CPU times (seconds).
  std::function<std::string(double numerator_s, double denominator_s)> derived;
};

// The median of `values` (the upper one of an even count); `values` must not be empty.
double Median(std::vector<double> values);

// The calling thread's CPU time in seconds (CLOCK_THREAD_CPUTIME_ID), which another process's
// load leaves alone.
double ThreadSeconds();

// Runs `a` and `b` in alternating pairs (a b, b a, a b, ...) after `warmup` untimed pairs and
// returns the median over `pairs` of cpu_time(b) / cpu_time(a), thread CPU time: a paired
// statistic that cancels the drift of a shared machine better than two separate medians.
double MedianPairedRatio(const std::function<void()>& a, const std::function<void()>& b,
                         int pairs, int warmup = 3);

// As MedianPairedRatio, the median of cpu_time(b) - cpu_time(a) in seconds: the cost of what
// b does more than a.
double MedianPairedDifference(const std::function<void()>& a, const std::function<void()>& b,
                              int pairs, int warmup = 3);

// Runs the registered benchmarks (10 interleaved repetitions by default, aggregates only),
// then prints "numerator / denominator = x.xxx" for each pair, from median CPU times (the
// benchmarks run one thread; CPU time is what another process's load leaves alone). Returns
// main's exit code.
int RunWithRatios(int argc, char** argv, const std::vector<Ratio>& ratios);

}  // namespace test
}  // namespace kd

#endif  // LIBKD_TESTING_RATIO_REPORTER_H_
