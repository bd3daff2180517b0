// libkd's native Llama against transformers' same model in Python, interleaved in one run (the
// peer serves its timings over a pipe, distill/models/peer_lm_timing.py): a training step
// (forward, next-token loss, backward, AdamW) at two sizes, and greedy generation at batch 1
// and 8. Both on tcmalloc (the peer by LD_PRELOAD), one intra-op thread each, the peer with
// transformers' default attention (sdpa). Prints per case the medians and libkd's speed-up.
//
//   bazel run -c opt //distill/models:lm_benchmark -- --pairs=5

#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/adamw.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "distill/models/causal_lm.h"
#include "distill/models/generate.h"
#include "distill/models/next_token.h"
#include "memdiag/tracking_allocator.h"
#include "testing/peer_process.h"
#include "testing/ratio_reporter.h"

ABSL_FLAG(int, pairs, 5, "libkd / transformers measurements per case, interleaved");
ABSL_FLAG(int, steps, 3, "training steps timed per measurement");

namespace kd {
namespace {

struct Shape {
  const char* name;
  int64_t hidden, layers, heads, kv_heads, inter, vocab;
};

// Two sizes a CPU trains in seconds: ~1.2M and ~9M parameters.
constexpr Shape kSmall{"small", 128, 2, 4, 2, 344, 2048};
constexpr Shape kMedium{"medium", 384, 4, 6, 2, 1024, 4096};

std::string Dims(const Shape& s) {
  return absl::StrCat(s.hidden, " ", s.layers, " ", s.heads, " ", s.kv_heads, " ", s.inter, " ",
                      s.vocab);
}

std::shared_ptr<CausalLm> Build(const Shape& s) {
  at::manual_seed(0);
  return *MakeCausalLm({.architecture = "llama",
                        .vocab_size = s.vocab,
                        .hidden_size = s.hidden,
                        .intermediate_size = s.inter,
                        .num_hidden_layers = s.layers,
                        .num_attention_heads = s.heads,
                        .num_key_value_heads = s.kv_heads,
                        .max_position_embeddings = 1024});
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double TrainStep(CausalLm& lm, torch::optim::AdamW& opt, const at::Tensor& ids, int steps) {
  auto step = [&] {
    NextTokenLoss(lm.forward(ids), ids).backward();
    opt.step();
    opt.zero_grad(/*set_to_none=*/true);
  };
  step();
  const double start = Now();
  for (int i = 0; i < steps; ++i) step();
  return (Now() - start) / steps;
}

double GenerateSeconds(CausalLm& lm, const at::Tensor& prompt, int64_t tokens) {
  const GenerateOptions options{.max_new_tokens = tokens};
  (void)Generate(lm, prompt, {}, options);
  const double start = Now();
  (void)Generate(lm, prompt, {}, options);
  return Now() - start;
}

// gradient_checkpointing: the peak of tensor memory a training step adds (memdiag's tracking
// allocator, over what the model and its optimizer hold) and its time, with against without.
void CheckpointingReport(int pairs) {
  TrackingAllocator& tracker = TrackingAllocator::Install();
  const int64_t batch = 8, seq = 128;
  double peak[2] = {0, 0};
  std::vector<double> seconds[2];
  for (int pair = 0; pair < pairs; ++pair) {
    for (int ckpt = 0; ckpt < 2; ++ckpt) {
      at::manual_seed(0);
      auto lm = *MakeCausalLm({.architecture = "llama",
                               .vocab_size = kMedium.vocab,
                               .hidden_size = kMedium.hidden,
                               .intermediate_size = kMedium.inter,
                               .num_hidden_layers = kMedium.layers,
                               .num_attention_heads = kMedium.heads,
                               .num_key_value_heads = kMedium.kv_heads,
                               .gradient_checkpointing = ckpt == 1});
      lm->train();
      torch::optim::AdamW opt(lm->parameters(), torch::optim::AdamWOptions(1e-4));
      const at::Tensor ids = at::randint(0, kMedium.vocab, {batch, seq}, at::kLong);
      TrainStep(*lm, opt, ids, 1);  // optimizer state in place
      tracker.ResetPeak();
      seconds[ckpt].push_back(TrainStep(*lm, opt, ids, 1));
      peak[ckpt] = static_cast<double>(tracker.peak_bytes() - tracker.baseline_bytes());
    }
  }
  TrackingAllocator::Uninstall();
  const double t0 = test::Median(seconds[0]), t1 = test::Median(seconds[1]);
  std::printf("gradient_checkpointing, medium (batch %ld x %ld): step peak %.1f MiB against "
              "%.1f MiB without (%.2fx), step time %.2fx\n",
              static_cast<long>(batch), static_cast<long>(seq), peak[1] / (1 << 20),
              peak[0] / (1 << 20), peak[1] / peak[0], t1 / t0);
}

struct Case {
  std::string label, request;
  std::function<double()> ours;
  double tokens;  // per measurement, for tokens/s
};

int Main() {
  at::set_num_threads(1);
  const bool tcmalloc = test::LinkedWithTcmalloc();
  test::PeerProcess peer;
  if (!peer.Start({.script = "distill/models/peer_lm_timing.py",
                   .env = {test::PreloadTcmalloc(), "OMP_NUM_THREADS=1"}})) {
    std::fprintf(stderr, "lm_benchmark: the peer did not start (tools/install_deps.sh --peers)\n");
    return 1;
  }
  const int steps = absl::GetFlag(FLAGS_steps);
  std::vector<Case> cases;
  for (const Shape* s : {&kSmall, &kMedium}) {
    const int64_t batch = 8, seq = s == &kSmall ? 128 : 64;
    auto lm = Build(*s);
    lm->train();
    auto opt = std::make_shared<torch::optim::AdamW>(lm->parameters(),
                                                     torch::optim::AdamWOptions(1e-4));
    const at::Tensor ids = at::randint(0, s->vocab, {batch, seq}, at::kLong);
    cases.push_back({absl::StrCat("train ", s->name, " (batch ", batch, " x ", seq, ")"),
                     absl::StrCat("train ", Dims(*s), " ", batch, " ", seq, " ", steps),
                     [lm, opt, ids, steps] { return TrainStep(*lm, *opt, ids, steps); },
                     static_cast<double>(batch * seq)});
  }
  for (int64_t batch : {1, 8}) {
    auto lm = Build(kSmall);
    const int64_t prompt = 16, tokens = 64;
    const at::Tensor ids = at::randint(0, kSmall.vocab, {batch, prompt}, at::kLong);
    cases.push_back({absl::StrCat("generate small, batch ", batch, ", ", tokens, " tokens"),
                     absl::StrCat("gen ", Dims(kSmall), " ", batch, " ", prompt, " ", tokens),
                     [lm, ids, tokens] { return GenerateSeconds(*lm, ids, tokens); },
                     static_cast<double>(batch * tokens)});
  }
  std::printf("libkd on %s, transformers %s on tcmalloc; 1 thread each; medians of %d\n",
              tcmalloc ? "tcmalloc" : "glibc", "(LD_PRELOAD)", absl::GetFlag(FLAGS_pairs));
  for (Case& c : cases) {
    std::vector<double> ours, theirs;
    for (int i = 0; i < absl::GetFlag(FLAGS_pairs); ++i) {
      ours.push_back(c.ours());
      const std::optional<std::vector<double>> answer = peer.Ask(c.request);
      if (!answer.has_value() || answer->empty()) {
        std::fprintf(stderr, "lm_benchmark: the peer did not answer \"%s\"\n", c.request.c_str());
        return 1;
      }
      theirs.push_back(answer->front());
    }
    const double a = test::Median(ours), b = test::Median(theirs);
    std::printf("%-40s libkd %9.1f tokens/s  transformers %9.1f tokens/s  speed-up %.2fx\n",
                c.label.c_str(), c.tokens / a, c.tokens / b, b / a);
  }
  CheckpointingReport(absl::GetFlag(FLAGS_pairs));
  return 0;
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return kd::Main();
}
