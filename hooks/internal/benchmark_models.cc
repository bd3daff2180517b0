#include "hooks/internal/benchmark_models.h"

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/grad_mode.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/nn/module.h>

#include "hooks/hook_point.h"
#include "hooks/native_model.h"
#include "hooks/torchscript_model.h"
#include "testing/ratio_reporter.h"

namespace kd {
namespace hooks_internal {
namespace {

// Native: the chain's modules, called through hook points.
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

}  // namespace

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

std::shared_ptr<Model> NativeChain() {
  std::shared_ptr<Model> model = MakeNativeModel(std::make_shared<ChainImpl>());
  model->SetTraining(false);
  return model;
}

void HookChain(Model& chain, ForwardHookManager& manager, HookValues values) {
  for (int i = 0; i < kHookedCalls; ++i) {
    if (!manager.AddHook(chain, "m" + std::to_string(i), {.values = values}).ok()) std::exit(2);
  }
}

[[gnu::noinline]] void ChainForwards(Model& model, ForwardHookManager& manager,
                                     const at::Tensor& input, int forwards, bool grad) {
  const at::Tensor x = grad ? input.clone().requires_grad_(true) : input;
  std::optional<at::NoGradGuard> no_grad;
  if (!grad) no_grad.emplace();
  const bool hooked = !manager.HookedKeys().empty();
  for (int i = 0; i < forwards; ++i) {
    model.Forward({x});
    if (hooked && !manager.PopIoDict().ok()) std::exit(2);
  }
}

double SecondsPerForward(Model& model, ForwardHookManager& manager, const at::Tensor& input,
                         bool grad, int forwards) {
  const at::Tensor x = grad ? input.clone().requires_grad_(true) : input;
  std::optional<at::NoGradGuard> no_grad;
  if (!grad) no_grad.emplace();
  const bool hooked = !manager.HookedKeys().empty();
  const double start = test::ThreadSeconds();
  for (int i = 0; i < forwards; ++i) {
    model.Forward({x});
    if (hooked && !manager.PopIoDict().ok()) std::exit(2);
  }
  return (test::ThreadSeconds() - start) / forwards;
}

}  // namespace hooks_internal
}  // namespace kd
