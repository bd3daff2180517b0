// silverspoon-kd's chunk_size, measured: peak memory and time of forward + backward of the
// divergences (kl_divergence, jsd, and libkd's forward_kl) on long sequences, three ways:
//   whole    chunk_size 0: the whole (tokens, vocabulary) at once
//   loop     silverspoon-kd's own algorithm, its chunk loop under autograd (written here with
//            the same libtorch ops), which keeps every chunk's softmaxes for the backward
//   libkd    libkd's chunk_size: nothing kept but the inputs, each chunk recomputed in the
//            backward (distill/losses/internal/chunked_divergence.h)
// Peak memory is the tracking allocator's (memdiag) high-water mark above what was live before
// the loss (the inputs), including the input gradients; time is the median of paired rounds
// (thread CPU time) against `whole`.
//
//   bazel run -c opt //distill/losses:chunk_memory_benchmark
//   bazel run -c opt //distill/losses:chunk_memory_benchmark -- --tokens=4096 --vocab=32000
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "distill/losses/loss.h"
#include "memdiag/tracking_allocator.h"
#include "testing/ratio_reporter.h"

ABSL_FLAG(int64_t, tokens, 2048, "tokens (batch x sequence length)");
ABSL_FLAG(int64_t, vocab, 32000, "vocabulary size (the last dimension)");
ABSL_FLAG(int64_t, chunk, 256, "chunk_size of the chunked variants");
ABSL_FLAG(int, pairs, 5, "timed pairs per variant");

namespace kd {
namespace {

// silverspoon-kd's chunked loop (silverspoon_kd/losses/kl.py) under autograd.
at::Tensor LoopKl(const at::Tensor& s, const at::Tensor& t, double temp, int64_t chunk) {
  at::Tensor total = at::zeros({}, at::kFloat);
  for (int64_t i = 0; i < s.size(0); i += chunk) {
    const int64_t end = std::min(i + chunk, s.size(0));
    const at::Tensor s_log = at::log_softmax(s.slice(0, i, end).to(at::kFloat) / temp, -1);
    const at::Tensor t_prob = at::softmax(t.slice(0, i, end).to(at::kFloat) / temp, -1);
    total = total + at::kl_div(s_log, t_prob, at::Reduction::Sum);
  }
  return total / s.size(0) * (temp * temp);
}

at::Tensor LoopJsd(const at::Tensor& s, const at::Tensor& t, double temp, double beta,
                   int64_t chunk) {
  at::Tensor total = at::zeros({}, at::kFloat);
  for (int64_t i = 0; i < s.size(0); i += chunk) {
    const int64_t end = std::min(i + chunk, s.size(0));
    const at::Tensor s_log = at::log_softmax(s.slice(0, i, end).to(at::kFloat) / temp, -1);
    const at::Tensor t_log = at::log_softmax(t.slice(0, i, end).to(at::kFloat) / temp, -1);
    const at::Tensor log_m = at::logaddexp(t_log + std::log(beta), s_log + std::log(1 - beta));
    total = total + beta * at::kl_div(log_m, t_log.exp(), at::Reduction::Sum) +
            (1 - beta) * at::kl_div(log_m, s_log.exp(), at::Reduction::Sum);
  }
  return total / s.size(0) * (temp * temp);
}

using LossFn = std::function<at::Tensor(const at::Tensor& s, const at::Tensor& t)>;

LossFn Registered(const std::string& key, int64_t chunk) {
  Kwargs kwargs = {{"temperature", 2.0}, {"chunk_size", chunk}};
  if (key == "jsd") kwargs["beta"] = 0.5;
  std::shared_ptr<Loss> loss = *MakeLoss(key, kwargs);
  return [loss](const at::Tensor& s, const at::Tensor& t) {
    return *loss->Forward({{"student", s}, {"teacher", t}});
  };
}

// Forward and backward of `fn` on fresh leaves (student and teacher both differentiated, as
// when both sides train); the peak bytes above what was live before.
int64_t PeakBytes(const LossFn& fn, const at::Tensor& s0, const at::Tensor& t0) {
  TrackingAllocator& tracker = TrackingAllocator::Install();
  const at::Tensor s = s0.clone().requires_grad_(true), t = t0.clone().requires_grad_(true);
  tracker.ResetPeak();
  fn(s, t).backward();
  return tracker.peak_bytes() - tracker.baseline_bytes();
}

void Run(const std::string& key) {
  const int64_t n = absl::GetFlag(FLAGS_tokens), v = absl::GetFlag(FLAGS_vocab);
  const int64_t chunk = absl::GetFlag(FLAGS_chunk);
  at::manual_seed(0);
  const at::Tensor s = at::randn({n, v}), t = at::randn({n, v});
  const LossFn whole = Registered(key, 0), libkd = Registered(key, chunk);
  const LossFn loop = key == "jsd" ? LossFn([chunk](const at::Tensor& a, const at::Tensor& b) {
    return LoopJsd(a, b, 2.0, 0.5, chunk);
  })
                                   : LossFn([chunk](const at::Tensor& a, const at::Tensor& b) {
                                       return LoopKl(a, b, 2.0, chunk);
                                     });
  const double mib = 1024.0 * 1024.0, input_mib = static_cast<double>(n * v * 4) / mib;
  const int64_t peak_whole = PeakBytes(whole, s, t);
  const int64_t peak_loop = PeakBytes(loop, s, t);
  const int64_t peak_libkd = PeakBytes(libkd, s, t);
  auto step = [&](const LossFn& fn) {
    return [&fn, &s, &t] {
      fn(s.clone().requires_grad_(true), t.clone().requires_grad_(true)).backward();
    };
  };
  const int pairs = absl::GetFlag(FLAGS_pairs);
  const double time_loop = test::MedianPairedRatio(step(whole), step(loop), pairs, 1);
  const double time_libkd = test::MedianPairedRatio(step(whole), step(libkd), pairs, 1);
  std::printf(
      "%s, %lld tokens x %lld vocabulary (one float32 input: %.0f MiB), chunk_size %lld:\n"
      "  peak above the inputs  whole %.0f MiB   silverspoon's loop %.0f MiB (%.2fx)   libkd "
      "%.0f MiB (%.2fx)\n"
      "  time / whole           silverspoon's loop %.3f   libkd %.3f\n",
      key.c_str(), static_cast<long long>(n), static_cast<long long>(v), input_mib,
      static_cast<long long>(chunk), peak_whole / mib, peak_loop / mib,
      static_cast<double>(peak_loop) / peak_whole, peak_libkd / mib,
      static_cast<double>(peak_libkd) / peak_whole, time_loop, time_libkd);
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  at::set_num_threads(1);
  kd::Run("kl_divergence");
  kd::Run("jsd");
  // libkd's sequence divergence with chunk_size (the LM soft loss beside shift_labels); its
  // "loop" column is silverspoon-kd's KL loop, the same algorithm without libkd's backward.
  kd::Run("forward_kl");
  return 0;
}
