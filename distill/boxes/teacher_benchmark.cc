// Teacher forward time: the box benchmark's teacher (fashion_cnn width 16, 1x28x28 -> 10) with
// one set of weights as TorchScript as exported (libtorch's graph executor), as the native
// libtorch model (eager), as TorchScript optimized for inference
// (ModelConfig.optimize_for_inference) and as an AOTInductor package (tools/export_teacher.py
// with its defaults: frozen weights, max-autotune), logits only as the others, and the package
// with one hooked feature (layer1's output) returned too, under no-grad, one intra-op thread,
// batch 4, 16 and 128. Rounds alternate the teachers; each round times --steps forwards of each;
// the figures are medians over --rounds, with each time's ratios to the TorchScript teacher's
// and to the optimized TorchScript teacher's in the same round. Optimized TorchScript's time
// differs from one process to the next (at batch 16 and 128 one of two levels, up to 1.7x apart,
// each steady within the process): run the benchmark several times. Then a whole KD step of the box
// benchmark's pair (teacher forward, the fashion_cnn width-4 student's forward, KD's loss,
// backward, SGD step) with each teacher, timed the same way.
//
//   bazel run -c opt //distill/boxes:teacher_benchmark -- --rounds=9
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/optim/sgd.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "distill/boxes/model_paths.h"
#include "distill/models/model_registry.h"
#include "hooks/aoti_model.h"
#include "hooks/torchscript_model.h"

ABSL_FLAG(int, rounds, 9, "rounds, each timing every teacher once");
ABSL_FLAG(int, steps, 40, "forwards (or KD steps) per timing");
ABSL_FLAG(int64_t, step_batch, 128, "the KD step's batch");
ABSL_FLAG(std::vector<std::string>, packages, {},
          "More packages of the same weights to time beside the others, as NAME=FILE.pt2 (made "
          "by tools/export_teacher.py from tests/testdata's fashion_cnn16.state.pt, e.g. with "
          "other --inductor_configs)");

namespace kd {
namespace {

double Median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// The teachers' order: TorchScript as exported first, optimized TorchScript third; the ratios
// are to those two.
constexpr size_t kOptimized = 2;

// Times `run(i)` for each of `names` (one warm-up call each), `rounds` rounds alternating them,
// `steps` calls each, and prints per name its median ms per call and the medians of its
// per-round ratios to the first's and to the optimized TorchScript teacher's, on a row labelled
// with `batch`.
void TimeAndPrint(const std::vector<const char*>& names, int64_t batch, int rounds, int steps,
                  const std::function<void(size_t)>& run) {
  std::vector<std::vector<double>> ms(names.size()), ratio(names.size()),
      to_optimized(names.size());
  for (size_t i = 0; i < names.size(); ++i) run(i);  // warm-up
  for (int r = 0; r < rounds; ++r) {
    std::vector<double> round;
    for (size_t i = 0; i < names.size(); ++i) {
      const auto start = std::chrono::steady_clock::now();
      for (int s = 0; s < steps; ++s) run(i);
      round.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count() /
          steps);
    }
    for (size_t i = 0; i < names.size(); ++i) {
      ms[i].push_back(round[i]);
      ratio[i].push_back(round[i] / round[0]);
      to_optimized[i].push_back(round[i] / round[kOptimized]);
    }
  }
  for (size_t i = 0; i < names.size(); ++i) {
    std::printf("%-36s %6lld %14.4f %16.3f %13.3f\n", names[i], static_cast<long long>(batch),
                Median(ms[i]), Median(ratio[i]), Median(to_optimized[i]));
  }
}

int Main() {
  at::set_num_threads(1);
  at::NoGradGuard no_grad;
  // The box benchmark's teacher, fashion_cnn width 16, one set of weights four ways (made by
  // tests/testdata/make_aoti_fixtures.py from its Python twin).
  auto native = MakeRegisteredModel("fashion_cnn", {{"width", int64_t{16}}});
  auto script = LoadTorchScriptModel("tests/testdata/fashion_cnn16.pt");
  auto package =
      LoadAotiModel("tests/testdata/fashion_cnn16_plain_aoti.pt2", {.single_threaded = true});
  auto hooked = LoadAotiModel("tests/testdata/fashion_cnn16_aoti.pt2", {.single_threaded = true});
  absl::Status loaded = !native.ok()    ? native.status()
                        : !script.ok()  ? script.status()
                        : !package.ok() ? package.status()
                        : !hooked.ok()
                            ? hooked.status()
                            : (*native)->LoadState("tests/testdata/fashion_cnn16.state.pt");
  if (!loaded.ok()) {
    std::fprintf(stderr, "teacher_benchmark: %s\n", std::string(loaded.message()).c_str());
    return 2;
  }
  (*native)->SetTraining(false);
  (*script)->SetTraining(false);
  auto optimized = OptimizeForInference(**script, "teacher");
  if (!optimized.ok()) {
    std::fprintf(stderr, "teacher_benchmark: %s\n",
                 std::string(optimized.status().message()).c_str());
    return 2;
  }
  struct Teacher {
    const char* name;
    Model* model;
  };
  std::vector<Teacher> teachers = {{"TorchScript as exported", script->get()},
                                   {"native libtorch (eager)", native->get()},
                                   {"TorchScript optimized for inference", optimized->get()},
                                   {"AOTInductor package", package->get()},
                                   {"package, layer1 hooked too", hooked->get()}};
  std::vector<std::pair<std::string, std::unique_ptr<Model>>> more;
  for (const std::string& spec : absl::GetFlag(FLAGS_packages)) {
    const size_t eq = spec.find('=');
    auto loaded = LoadAotiModel(eq == std::string::npos ? spec : spec.substr(eq + 1),
                                {.single_threaded = true});
    if (!loaded.ok()) {
      std::fprintf(stderr, "teacher_benchmark: --packages: %s\n",
                   std::string(loaded.status().message()).c_str());
      return 2;
    }
    more.emplace_back("package " + spec.substr(0, eq), *std::move(loaded));
  }
  for (const auto& [name, model] : more) teachers.push_back({name.c_str(), model.get()});
  // The same weights: the same logits, to rounding.
  {
    const at::Tensor x = at::randn({2, 1, 28, 28});
    const at::Tensor want = (*script)->Forward({x}).toTensor();
    for (const Teacher& t : teachers) {
      const double diff = (t.model->Forward({x}).toTensor() - want).abs().max().item<double>();
      if (diff > 1e-4) {
        std::fprintf(stderr, "teacher_benchmark: %s differs from TorchScript by %g\n", t.name,
                     diff);
        return 1;
      }
    }
  }
  const int rounds = absl::GetFlag(FLAGS_rounds), steps = absl::GetFlag(FLAGS_steps);
  std::vector<const char*> names;
  for (const Teacher& t : teachers) names.push_back(t.name);
  std::printf("%-36s %6s %14s %16s %13s\n", "teacher", "batch", "ms / forward", "/ TorchScript",
              "/ optimized");
  for (int64_t batch : {4, 16, 128}) {
    const at::Tensor x = at::randn({batch, 1, 28, 28});
    TimeAndPrint(names, batch, rounds, steps, [&](size_t i) { teachers[i].model->Forward({x}); });
  }

  // A whole KD step with each teacher: the teacher's logits (no grad), a fashion_cnn student
  // (width 4) forward, KD's loss (T 4, alpha 0.5), backward and an SGD step; one student per
  // teacher, so each trains on its own.
  const int64_t batch = absl::GetFlag(FLAGS_step_batch);
  const at::Tensor x = at::randn({batch, 1, 28, 28});
  const at::Tensor y = at::randint(0, 10, {batch});
  std::vector<std::unique_ptr<Model>> students;
  std::vector<std::unique_ptr<torch::optim::SGD>> optimizers;
  for (size_t i = 0; i < teachers.size(); ++i) {
    auto student = MakeRegisteredModel("fashion_cnn", {{"width", int64_t{4}}});
    if (!student.ok()) {
      std::fprintf(stderr, "teacher_benchmark: %s\n",
                   std::string(student.status().message()).c_str());
      return 2;
    }
    std::vector<at::Tensor> params;
    for (auto& [name, p] : (*student)->NamedParameters()) params.push_back(p);
    optimizers.push_back(
        std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.01)));
    students.push_back(*std::move(student));
  }
  auto step = [&](size_t i) {
    at::Tensor soft;
    {
      at::NoGradGuard no_grad;
      soft = at::softmax(teachers[i].model->Forward({x}).toTensor() / 4.0, 1);
    }
    at::AutoGradMode grad(true);
    const at::Tensor logits = students[i]->Forward({x}).toTensor();
    const at::Tensor loss =
        0.5 * at::cross_entropy_loss(logits, y) +
        0.5 * 16.0 *
            (at::kl_div(at::log_softmax(logits / 4.0, 1), soft, at::Reduction::Sum) / batch);
    optimizers[i]->zero_grad();
    loss.backward();
    optimizers[i]->step();
  };
  std::printf("\n%-36s %6s %14s %16s %13s\n", "KD step (fashion_cnn student) with", "batch",
              "ms / step", "/ TorchScript", "/ optimized");
  TimeAndPrint(names, batch, rounds, steps, step);
  return 0;
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return kd::Main();
}
