// Forward + PopIoDict with hooks on 5 modules (inputs and outputs) against a plain forward:
// on a TorchScript ResNet-18 (1x3x224x224; generated on first use), on the small CNN fixture
// (TorchScript and native), and on a chain of 5 modules that each add 1 to a 1-element tensor,
// where the forward costs next to nothing and the difference is the cost of the hooks. Prints
// the ratios of medians measured in this run and the cost of one hooked call in ns.
//
//   bazel run -c opt //hooks:forward_hook_manager_benchmark
//
// With --chain_only=plain|references|as_returned it runs only the native chain, plain or hooked
// with those values, 2200 forwards (each hooked one popped) in ChainForwards, and exits: for
// instruction counts, which the machine's noise does not move. Per hooked call, what values as
// returned add = (as_returned - references) / 11000 of:
//   valgrind --tool=callgrind --toggle-collect='*ChainForwards*'
//       bazel-out/k8-opt/bin/hooks/forward_hook_manager_benchmark --chain_only=as_returned
#include <functional>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/nn/module.h>

#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "hooks/forward_hook_manager.h"
#include "hooks/hook_point.h"
#include "hooks/native_model.h"
#include "hooks/torchscript_model.h"
#include "testing/bench_models.h"
#include "testing/ratio_reporter.h"
#include "testing/small_cnn.h"

namespace kd {
namespace {

constexpr int kHookedCalls = 5;

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

// TorchScript: root.forward calls m0 ... m4, each `x + 1`.
std::shared_ptr<Model> TorchScriptChain() {
  torch::jit::Module root("Chain");
  std::string body = "def forward(self, x):\n";
  for (int i = 0; i < kHookedCalls; ++i) {
    torch::jit::Module m("AddOne" + std::to_string(i));
    m.define("def forward(self, x):\n  return x + 1\n");
    root.register_module("m" + std::to_string(i), m);
    body += "  x = self.m" + std::to_string(i) + ".forward(x)\n";
  }
  root.define(body + "  return x\n");
  std::shared_ptr<Model> model = MakeTorchScriptModel(root);
  model->SetTraining(false);
  return model;
}

// Native: the same chain through hook points.
struct AddOneImpl : torch::nn::Module {
  at::Tensor forward(at::Tensor x) { return x + 1; }
};
TORCH_MODULE(AddOne);

struct ChainImpl : torch::nn::Module {
  ChainImpl() {
    for (int i = 0; i < kHookedCalls; ++i) {
      m.push_back(register_module("m" + std::to_string(i), AddOne()));
    }
  }
  at::Tensor forward(at::Tensor x) {
    for (AddOne& child : m) x = Call(child, x);
    return x;
  }
  std::vector<AddOne> m;
};

std::shared_ptr<Model> NativeChain() {
  std::shared_ptr<Model> model = MakeNativeModel(std::make_shared<ChainImpl>());
  model->SetTraining(false);
  return model;
}

// Hooks m0..m4 of a chain with `values`; exits on failure.
void HookChain(Model& chain, ForwardHookManager& manager, HookValues values) {
  for (int i = 0; i < kHookedCalls; ++i) {
    if (!manager.AddHook(chain, "m" + std::to_string(i), {.values = values}).ok()) std::exit(2);
  }
}

// `forwards` forwards of `model` on `input`, each popped from `manager` if it has hooks.
[[gnu::noinline]] void ChainForwards(Model& model, ForwardHookManager& manager,
                                     const at::Tensor& input, int forwards) {
  at::NoGradGuard no_grad;
  const bool hooked = !manager.HookedKeys().empty();
  for (int i = 0; i < forwards; ++i) {
    model.Forward({input});
    if (hooked && !manager.PopIoDict().ok()) std::exit(2);
  }
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
  const double seconds = test::MedianPairedDifference(
      [&] { ChainForwards(*plain, no_hooks, one, kForwardsPerRun); },
      [&] { ChainForwards(*hooked, manager, one, kForwardsPerRun); },
      /*pairs=*/101);
  return seconds * 1e9 / (kForwardsPerRun * kHookedCalls);
}

// --chain_only=MODE: see the top of this file.
int ChainOnly(std::string_view mode) {
  std::shared_ptr<Model> model = NativeChain();
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
  ChainForwards(*model, manager, at::zeros({1}), 2200);
  return 0;
}

int Main(int argc, char** argv) {
  at::set_num_threads(1);
  constexpr std::string_view kChainOnly = "--chain_only=";
  if (argc > 1 && std::string_view(argv[1]).starts_with(kChainOnly)) {
    return ChainOnly(std::string_view(argv[1]).substr(kChainOnly.size()));
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
