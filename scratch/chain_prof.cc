#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/nn/module.h>
#include "hooks/forward_hook_manager.h"
#include "hooks/hook_point.h"
#include "hooks/native_model.h"

namespace kd {
struct AddOneImpl : torch::nn::Module {
  at::Tensor forward(at::Tensor x) { return x + 1; }
};
TORCH_MODULE(AddOne);
struct ChainImpl : torch::nn::Module {
  ChainImpl() {
    for (int i = 0; i < 5; ++i) m.push_back(register_module("m" + std::to_string(i), AddOne()));
  }
  at::Tensor forward(at::Tensor x) {
    for (AddOne& child : m) x = Call(child, x);
    return x;
  }
  std::vector<AddOne> m;
};
}  // namespace kd

int main(int argc, char** argv) {
  at::set_num_threads(1);
  const bool refs = argc > 1 && std::string(argv[1]) == "refs";
  const bool hooked = !(argc > 1 && std::string(argv[1]) == "plain");
  auto model = kd::MakeNativeModel(std::make_shared<kd::ChainImpl>());
  model->SetTraining(false);
  kd::ForwardHookManager manager;
  if (hooked) for (int i = 0; i < 5; ++i) (void)manager.AddHook(*model, "m" + std::to_string(i), {.values = refs ? kd::HookValues::kReferences : kd::HookValues::kAsReturned});
  at::NoGradGuard no_grad;
  const at::Tensor one = at::zeros({1});
  const int n = argc > 2 ? std::atoi(argv[2]) : 2000000;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    model->Forward({one});
    if (hooked) (void)manager.PopIoDict();
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%.1f ns per forward\n", s * 1e9 / n);
}
