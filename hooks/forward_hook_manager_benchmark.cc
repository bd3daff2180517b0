// Forward + PopIoDict with hooks on 5 modules (inputs and outputs) against a plain forward:
// on a TorchScript ResNet-18 (1x3x224x224; generated on first use), on the small CNN fixture
// (TorchScript and native), and on a chain of 5 modules that each add 1 to a 1-element tensor,
// where the forward costs next to nothing and the difference is the cost of the hooks. Prints
// the ratios of medians measured in this run and the cost of one hooked call in ns.
//
//   bazel run -c opt //hooks:forward_hook_manager_benchmark
//
// With --peers it runs libkd's hooks against torchdistill's ForwardHookManager instead, both
// sides in one run (needs tools/install_deps.sh --peers; see PeersMain):
//
//   bazel run -c opt //hooks:forward_hook_manager_benchmark -- --peers
//
// Both sides allocate with the same malloc: this target links tcmalloc, as libkd's training
// binaries do (//tools:distill), and runs the peer on it (LD_PRELOAD); its twin
// //hooks:forward_hook_manager_benchmark_glibc runs both on the C library's malloc (libkd as a
// library in a program that keeps glibc's). The header line names the malloc.
//
// With --chain_only=plain|references|as_returned it runs only the native chain, plain or hooked
// with those values, 2200 forwards (each hooked one popped) in ChainForwards, and exits: for
// instruction counts, which the machine's noise does not move. Per hooked call, what values as
// returned add = (as_returned - references) / 11000 of:
//   valgrind --tool=callgrind --toggle-collect='*ChainForwards*'
//       bazel-out/k8-opt/bin/hooks/forward_hook_manager_benchmark --chain_only=as_returned
// Further flags after it: --grad (an input that requires grad: autograd records the graph),
// --torchscript (the TorchScript chain), --forwards=N (instead of 2200; for perf record). It
// prints the thread CPU time per forward.
//
// With --chain_pairs it prints the cost of one hooked call in the chain in all eight modes
// (see ChainPairs), libkd alone, and exits.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "hooks/forward_hook_manager.h"
#include "hooks/internal/benchmark_models.h"
#include "hooks/native_model.h"
#include "testing/bench_models.h"
#include "testing/peer_process.h"
#include "testing/ratio_reporter.h"
#include "testing/small_cnn.h"

namespace kd {
namespace {

using hooks_internal::ChainForwards;
using hooks_internal::HookChain;
using hooks_internal::kHookedCalls;
using hooks_internal::NativeChain;
using hooks_internal::SecondsPerForward;
using hooks_internal::TorchScriptChain;

// One benchmark: `model` (with or without hooks from `paths`) on `input`.
void Register(const std::string& name, std::shared_ptr<Model> model, at::Tensor input,
              std::vector<std::string> paths) {
  auto manager = std::make_shared<ForwardHookManager>();
  for (const std::string& path : paths) {
    absl::Status s = manager->AddHook(*model, path);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      std::exit(2);
    }
  }
  const bool hooked = !paths.empty();
  benchmark::RegisterBenchmark(name.c_str(),
                               [model, manager, input, hooked](benchmark::State& state) {
                                 at::NoGradGuard no_grad;
                                 for (auto _ : state) {
                                   c10::IValue out = model->Forward({input});
                                   benchmark::DoNotOptimize(out);
                                   if (hooked) {
                                     auto io = manager->PopIoDict();
                                     benchmark::DoNotOptimize(io);
                                   }
                                 }
                               })
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
}

std::string NsPerHookedCall(double hooked_s, double plain_s) {
  return absl::StrFormat("cost of one hooked call: %.0f ns ((hooked - plain) / %d calls)",
                         (hooked_s - plain_s) * 1e9 / kHookedCalls, kHookedCalls);
}

// The cost of one hooked call (input and output recorded, popped), as the median over
// alternating pairs of (hooked chain - plain chain) CPU time, per hooked call: the steadier
// statistic on a shared machine. Returns ns.
double PairedNsPerHookedCall(const std::function<std::shared_ptr<Model>()>& make,
                             HookValues values) {
  constexpr int kForwardsPerRun = 400;
  std::shared_ptr<Model> plain = make();
  std::shared_ptr<Model> hooked = make();
  ForwardHookManager no_hooks, manager;
  HookChain(*hooked, manager, values);
  const at::Tensor one = at::zeros({1});
  const double seconds =
      test::MedianPairedDifference([&] { ChainForwards(*plain, no_hooks, one, kForwardsPerRun); },
                                   [&] { ChainForwards(*hooked, manager, one, kForwardsPerRun); },
                                   /*pairs=*/101);
  return seconds * 1e9 / (kForwardsPerRun * kHookedCalls);
}

// --peers: libkd's ForwardHookManager against torchdistill's (hooks/peer_hook_timing.py, a
// Python process of libkd's virtual environment), on the same models, hooked paths and inputs,
// without and with autograd, in rounds of slices that alternate libkd plain, libkd hooked
// (references, as returned), torchdistill plain, torchdistill hooked. Prints, per model: the cost of one hooked call on each side
// ((hooked - plain) / 5 hooked calls, medians over the rounds), the median of the per-round
// ratios torchdistill / libkd, and each side's hooked / plain.
int PeersMain() {
  test::PeerProcess peer;
  test::PeerProcess::Options peer_options{.script = "hooks/peer_hook_timing.py"};
  // Like for like: the peer allocates with this process's malloc.
  if (test::LinkedWithTcmalloc()) peer_options.env.push_back(test::PreloadTcmalloc());
  if (!peer.Start(peer_options) || !peer.Ask("time chain5 0 0 1").has_value()) {
    std::fprintf(stderr,
                 "the peer script did not answer (is torchdistill installed? "
                 "tools/install_deps.sh --peers)\n");
    return 1;
  }
  struct Case {
    std::string peer_model;  // the script's name
    std::string libkd;       // libkd's model kind, for the output
    std::function<std::shared_ptr<Model>()> make;
    at::Tensor input;
    std::vector<std::string> paths;
    int forwards;  // per timing
    // Whether the per-call difference is readable: only where a forward costs next to nothing
    // (the chain). Elsewhere it is within a forward's noise, and hooked/plain is the figure.
    bool per_call;
  };
  auto small_cnn_native = [] {
    std::shared_ptr<Model> m = MakeNativeModel(test::SmallCnn().ptr());
    m->SetTraining(false);
    return m;
  };
  auto small_cnn_torchscript = [] {
    return test::LoadTorchScriptOrDie("tests/testdata/small_cnn.pt");
  };
  const std::vector<std::string> chain_paths = {"m0", "m1", "m2", "m3", "m4"};
  const std::vector<std::string> cnn_paths = {"stem.0", "layer1.0", "down", "layer2.0.conv1", "fc"};
  std::vector<Case> cases = {
      {"chain5", "native", NativeChain, at::zeros({1}), chain_paths, 2000, true},
      {"chain5", "torchscript", TorchScriptChain, at::zeros({1}), chain_paths, 2000, true},
      {"small_cnn", "native", small_cnn_native, at::randn({32, 1, 28, 28}), cnn_paths, 40, false},
      {"small_cnn", "torchscript", small_cnn_torchscript, at::randn({32, 1, 28, 28}), cnn_paths, 40,
       false},
  };
  if (absl::StatusOr<std::string> resnet = test::GeneratedResNet18(); resnet.ok()) {
    cases.push_back({"resnet18",
                     "torchscript",
                     [path = *resnet] { return test::LoadTorchScriptOrDie(path); },
                     at::randn({1, 3, 224, 224}),
                     {"layer1", "layer2.0", "layer3.1.conv2", "layer4", "fc"},
                     4,
                     false});
  }
  constexpr int kRounds = 15;
  std::printf(
      "libkd's ForwardHookManager against torchdistill's, inputs and outputs of 5 modules "
      "recorded, the I/O dict popped every forward; one thread, eval mode, both sides on %s's "
      "malloc, %d alternating rounds, thread CPU time, medians. libkd values: references, as "
      "torchdistill records "
      "them (like for like), and as returned, libkd's default (a value an in-place op later "
      "writes is kept as it was returned: work torchdistill does not do):\n"
      "%-10s %-12s %-8s %-12s %14s %14s %10s %16s %16s\n",
      test::MallocName(), kRounds, "model", "libkd model", "autograd", "libkd values",
      "libkd ns/call", "peer ns/call", "peer/libkd", "libkd hooked/plain", "peer hooked/plain");
  for (const Case& c : cases) {
    for (const bool grad : {false, true}) {
      std::shared_ptr<Model> plain = c.make(), by_reference = c.make(), as_returned = c.make();
      ForwardHookManager no_hooks, references_manager, as_returned_manager;
      for (const std::string& path : c.paths) {
        if (!references_manager.AddHook(*by_reference, path, {.values = HookValues::kReferences})
                 .ok() ||
            !as_returned_manager.AddHook(*as_returned, path).ok()) {
          return 2;
        }
      }
      struct Side {
        std::vector<double> ns, over;
      };
      Side references, returned, peer_side;
      std::vector<double> ratio_references, ratio_returned;
      auto peer_time = [&](int hooked_flag, int forwards) {
        const std::string request =
            absl::StrCat("time ", c.peer_model, " ", hooked_flag, " ", grad ? 1 : 0, " ", forwards);
        const std::optional<std::vector<double>> answer = peer.Ask(request);
        if (!answer.has_value() || answer->size() != 1) {
          std::fprintf(stderr, "the peer script failed on \"%s\"\n", request.c_str());
          std::exit(1);
        }
        return answer->front();
      };
      // One untimed round each side.
      SecondsPerForward(*plain, no_hooks, c.input, grad, c.forwards);
      SecondsPerForward(*by_reference, references_manager, c.input, grad, c.forwards);
      SecondsPerForward(*as_returned, as_returned_manager, c.input, grad, c.forwards);
      peer_time(0, c.forwards);
      peer_time(1, c.forwards);
      const double hooks = static_cast<double>(c.paths.size());
      // A round's forwards run in kSlices slices per side, the sides' order rotating from slice
      // to slice, so that a drift of the machine's speed within the round (this noisy
      // machine's frequency and its neighbours) falls on every side alike.
      constexpr int kSlices = 8;
      const int per_slice = std::max(1, c.forwards / kSlices);
      for (int round = 0; round < kRounds; ++round) {
        double lp = 0, lr = 0, la = 0, pp = 0, ph = 0;
        for (int slice = 0; slice < kSlices; ++slice) {
          for (int k = 0; k < 3; ++k) {
            switch ((k + slice + round) % 3) {
              case 0:
                lp += SecondsPerForward(*plain, no_hooks, c.input, grad, per_slice);
                break;
              case 1:
                lr +=
                    SecondsPerForward(*by_reference, references_manager, c.input, grad, per_slice);
                break;
              default:
                la +=
                    SecondsPerForward(*as_returned, as_returned_manager, c.input, grad, per_slice);
            }
          }
          const bool hooked_first = (slice + round) % 2 == 1;
          const double first = peer_time(hooked_first ? 1 : 0, per_slice);
          const double second = peer_time(hooked_first ? 0 : 1, per_slice);
          pp += hooked_first ? second : first;
          ph += hooked_first ? first : second;
        }
        lp /= kSlices, lr /= kSlices, la /= kSlices, pp /= kSlices, ph /= kSlices;
        const double peer_call = (ph - pp) / hooks;
        peer_side.ns.push_back(peer_call * 1e9);
        peer_side.over.push_back(ph / pp);
        references.ns.push_back((lr - lp) / hooks * 1e9);
        references.over.push_back(lr / lp);
        ratio_references.push_back(peer_call / ((lr - lp) / hooks));
        returned.ns.push_back((la - lp) / hooks * 1e9);
        returned.over.push_back(la / lp);
        ratio_returned.push_back(peer_call / ((la - lp) / hooks));
      }
      for (const auto& [name, side, ratios] :
           {std::tuple<const char*, const Side&, const std::vector<double>&>{
                "references", references, ratio_references},
            {"as returned", returned, ratio_returned}}) {
        const std::string libkd_cell =
            c.per_call ? absl::StrFormat("%.0f", test::Median(side.ns)) : "-";
        const std::string peer_cell =
            c.per_call ? absl::StrFormat("%.0f", test::Median(peer_side.ns)) : "-";
        const std::string ratio_cell =
            c.per_call ? absl::StrFormat("%.1f", test::Median(ratios)) : "-";
        std::printf("%-10s %-12s %-8s %-12s %14s %14s %10s %16.4f %16.4f\n", c.peer_model.c_str(),
                    c.libkd.c_str(), grad ? "yes" : "no", name, libkd_cell.c_str(),
                    peer_cell.c_str(), ratio_cell.c_str(), test::Median(side.over),
                    test::Median(peer_side.over));
      }
      std::fflush(stdout);
    }
  }
  std::printf(
      "(ns/call: (hooked - plain) / 5 per forward, on the chain only; where a forward takes "
      "milliseconds that difference is within its noise (\"-\"), and hooked/plain is the figure "
      "to read)\n");
  return 0;
}

// --chain_only=MODE [--grad] [--torchscript] [--forwards=N]: see the top of this file.
int ChainOnly(std::string_view mode, const std::vector<std::string_view>& flags) {
  bool grad = false, torchscript = false;
  int forwards = 2200;
  for (std::string_view flag : flags) {
    if (flag == "--grad") {
      grad = true;
    } else if (flag == "--torchscript") {
      torchscript = true;
    } else if (flag.starts_with("--forwards=")) {
      forwards = std::atoi(std::string(flag.substr(11)).c_str());
    } else {
      std::fprintf(stderr, "--chain_only: unknown flag %s (--grad, --torchscript, --forwards=N)\n",
                   std::string(flag).c_str());
      return 2;
    }
  }
  std::shared_ptr<Model> model = torchscript ? TorchScriptChain() : NativeChain();
  ForwardHookManager manager;
  if (mode != "plain") {
    if (mode != "references" && mode != "as_returned") {
      std::fprintf(stderr, "--chain_only: %s is none of plain, references, as_returned\n",
                   std::string(mode).c_str());
      return 2;
    }
    HookChain(*model, manager,
              mode == "references" ? HookValues::kReferences : HookValues::kAsReturned);
  }
  // Untimed and uncounted: TorchScript compiles (and profiles) the graph on the first forwards.
  hooks_internal::SecondsPerForward(*model, manager, at::zeros({1}), grad, 3);
  const double start = test::ThreadSeconds();
  ChainForwards(*model, manager, at::zeros({1}), forwards, grad);
  std::printf("%.0f ns per forward (thread CPU time)\n",
              (test::ThreadSeconds() - start) * 1e9 / forwards);
  return 0;
}

// --chain_pairs: the cost of one hooked call in the chain in every mode (native and TorchScript,
// references and as returned, without and with autograd): libkd alone, each hooked side against
// the plain chain in rounds of 400 forwards that rotate the three sides' order, medians of the
// per-round differences (--chain_pairs=ROUNDS, 61 by default); thread CPU time.
int ChainPairs(int rounds) {
  constexpr int kForwards = 400;
  std::printf("%-12s %-8s %16s %16s\n", "libkd model", "autograd", "references ns",
              "as returned ns");
  for (const bool torchscript : {false, true}) {
    for (const bool grad : {false, true}) {
      auto make = torchscript ? TorchScriptChain : NativeChain;
      std::shared_ptr<Model> plain = make(), by_reference = make(), as_returned = make();
      ForwardHookManager no_hooks, references_manager, as_returned_manager;
      HookChain(*by_reference, references_manager, HookValues::kReferences);
      HookChain(*as_returned, as_returned_manager, HookValues::kAsReturned);
      const at::Tensor one = at::zeros({1});
      struct Side {
        Model* model;
        ForwardHookManager* manager;
        double seconds = 0;
      };
      Side sides[3] = {{plain.get(), &no_hooks},
                       {by_reference.get(), &references_manager},
                       {as_returned.get(), &as_returned_manager}};
      std::vector<double> references, returned;
      for (int round = -3; round < rounds; ++round) {
        for (int i = 0; i < 3; ++i) {
          Side& side = sides[(i + round + 3) % 3];
          side.seconds = SecondsPerForward(*side.model, *side.manager, one, grad, kForwards);
        }
        if (round < 0) continue;  // warm-up
        references.push_back((sides[1].seconds - sides[0].seconds) * 1e9 / kHookedCalls);
        returned.push_back((sides[2].seconds - sides[0].seconds) * 1e9 / kHookedCalls);
      }
      std::printf("%-12s %-8s %16.0f %16.0f\n", torchscript ? "torchscript" : "native",
                  grad ? "yes" : "no", test::Median(references), test::Median(returned));
      std::fflush(stdout);
    }
  }
  return 0;
}

int Main(int argc, char** argv) {
  at::set_num_threads(1);
  if (argc > 1 && std::string_view(argv[1]) == "--peers") return PeersMain();
  constexpr std::string_view kChainPairs = "--chain_pairs";
  if (argc > 1 && std::string_view(argv[1]).starts_with(kChainPairs)) {
    const std::string_view rounds = std::string_view(argv[1]).substr(kChainPairs.size());
    return ChainPairs(rounds.starts_with("=") ? std::atoi(std::string(rounds.substr(1)).c_str())
                                              : 61);
  }
  constexpr std::string_view kChainOnly = "--chain_only=";
  if (argc > 1 && std::string_view(argv[1]).starts_with(kChainOnly)) {
    return ChainOnly(std::string_view(argv[1]).substr(kChainOnly.size()),
                     std::vector<std::string_view>(argv + 2, argv + argc));
  }
  const std::vector<std::string> small_paths = {"stem.0", "layer1.0", "down", "layer2.0.conv1",
                                                "fc"};
  const at::Tensor small_input = at::randn({1, 1, 28, 28});
  const std::string small_cnn = "tests/testdata/small_cnn.pt";
  Register("plain/small_cnn/torchscript", test::LoadTorchScriptOrDie(small_cnn), small_input, {});
  Register("hooked/small_cnn/torchscript", test::LoadTorchScriptOrDie(small_cnn), small_input,
           small_paths);
  {
    // Hooks added, run, and removed: the module's own forward (and cost) must be back.
    std::shared_ptr<Model> model = test::LoadTorchScriptOrDie(small_cnn);
    ForwardHookManager manager;
    for (const std::string& path : small_paths) (void)manager.AddHook(*model, path);
    at::NoGradGuard no_grad;
    model->Forward({small_input});
    manager.Clear();
    Register("hooks_removed/small_cnn/torchscript", model, small_input, {});
  }
  auto native = [] {
    std::shared_ptr<Model> m = MakeNativeModel(test::SmallCnn().ptr());
    m->SetTraining(false);
    return m;
  };
  Register("plain/small_cnn/native", native(), small_input, {});
  Register("hooked/small_cnn/native", native(), small_input, small_paths);

  const std::vector<std::string> chain_paths = {"m0", "m1", "m2", "m3", "m4"};
  const at::Tensor one = at::zeros({1});
  Register("plain/chain5/torchscript", TorchScriptChain(), one, {});
  Register("hooked/chain5/torchscript", TorchScriptChain(), one, chain_paths);
  Register("plain/chain5/native", NativeChain(), one, {});
  Register("hooked/chain5/native", NativeChain(), one, chain_paths);

  std::printf(
      "cost of one hooked call in the chain, median of 101 alternating pairs of 400 forwards "
      "(CPU time; target: at most 260 ns), values as returned (default) / references: "
      "torchscript %.0f / %.0f ns, native %.0f / %.0f ns\n\n",
      PairedNsPerHookedCall(TorchScriptChain, HookValues::kAsReturned),
      PairedNsPerHookedCall(TorchScriptChain, HookValues::kReferences),
      PairedNsPerHookedCall(NativeChain, HookValues::kAsReturned),
      PairedNsPerHookedCall(NativeChain, HookValues::kReferences));

  std::vector<test::Ratio> ratios = {
      {"hooked/small_cnn/torchscript", "plain/small_cnn/torchscript", NsPerHookedCall},
      {"hooks_removed/small_cnn/torchscript", "plain/small_cnn/torchscript"},
      {"hooked/small_cnn/native", "plain/small_cnn/native", NsPerHookedCall},
      {"hooked/chain5/torchscript", "plain/chain5/torchscript", NsPerHookedCall},
      {"hooked/chain5/native", "plain/chain5/native", NsPerHookedCall},
  };
  absl::StatusOr<std::string> resnet = test::GeneratedResNet18();
  if (resnet.ok()) {
    const at::Tensor input = at::randn({1, 3, 224, 224});
    const std::vector<std::string> resnet_paths = {"layer1", "layer2.0", "layer3.1.conv2", "layer4",
                                                   "fc"};
    std::shared_ptr<Model> plain = test::LoadTorchScriptOrDie(*resnet);
    std::shared_ptr<Model> hooked = test::LoadTorchScriptOrDie(*resnet);
    Register("plain/resnet18/torchscript", plain, input, {});
    Register("hooked/resnet18/torchscript", hooked, input, resnet_paths);
    {
      // The same comparison as alternating pairs, the steadier statistic on a shared machine
      // (on models of their own: the registered ones carry their benchmark's hooks).
      std::shared_ptr<Model> plain = test::LoadTorchScriptOrDie(*resnet);
      std::shared_ptr<Model> hooked = test::LoadTorchScriptOrDie(*resnet);
      ForwardHookManager manager;
      for (const std::string& path : resnet_paths) (void)manager.AddHook(*hooked, path);
      at::NoGradGuard no_grad;
      const double paired = test::MedianPairedRatio([&] { plain->Forward({input}); },
                                                    [&] {
                                                      hooked->Forward({input});
                                                      (void)manager.PopIoDict();
                                                    },
                                                    /*pairs=*/40);
      std::printf(
          "ResNet-18 hooked / plain, median of 40 alternating pairs (CPU time): %.4f "
          "(overhead %+.2f%%; target: at most 2%%)\n\n",
          paired, (paired - 1) * 100);
    }
    ratios.push_back(
        {"hooked/resnet18/torchscript", "plain/resnet18/torchscript", [](double h, double p) {
           return absl::StrFormat("overhead: %+.2f%% (target: at most 2%%)", (h / p - 1) * 100);
         }});
  } else {
    std::fprintf(stderr, "skipping ResNet-18: %s\n",
                 std::string(resnet.status().message()).c_str());
  }
  return test::RunWithRatios(argc, argv, ratios);
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) { return kd::Main(argc, argv); }
