#include "distill/boxes/internal/hand_kd_loop.h"

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/optim/sgd.h>

#include "distill/data/data_loader.h"
#include "distill/data/dataset.h"
#include "distill/models/model_registry.h"

namespace kd {

double HandKdEpoch(int samples, int batch_size, const std::string& teacher_file,
                   bool optimize_teacher) {
  auto teacher = *MakeRegisteredModel("fashion_cnn", {{"width", int64_t{16}}});
  auto student = *MakeRegisteredModel("fashion_cnn", {{"width", int64_t{4}}});
  auto dataset =
      *MakeDataset("synthetic", {{"num_samples", int64_t{samples}}, {"num_classes", int64_t{10}}});
  auto loader = *DataLoader::Create(
      dataset, {.batch_size = batch_size, .shuffle = true, .drop_last = true, .seed = 1});
  std::vector<at::Tensor> params;
  for (const auto& [name, p] : student->NamedParameters()) params.push_back(p);
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.05).momentum(0.9));
  teacher->SetTraining(false);
  student->SetTraining(true);
  const double t = 4;
  std::optional<torch::jit::Module> scripted;
  if (!teacher_file.empty()) {
    scripted = torch::jit::load(teacher_file);
    scripted->eval();
    if (optimize_teacher) {
      torch::jit::Module frozen = torch::jit::freeze(*scripted);
      scripted = torch::jit::optimize_for_inference(frozen);
    }
  }
  const auto start = std::chrono::steady_clock::now();
  loader.SetEpoch(0);
  for (int64_t i = 0; i < loader.num_batches(); ++i) {
    const Batch batch = loader.GetBatch(i);
    at::Tensor teacher_logits;
    {
      at::NoGradGuard no_grad;
      teacher_logits = scripted ? scripted->forward({batch.samples}).toTensor()
                                : teacher->Forward({batch.samples}).toTensor();
    }
    const at::Tensor s = student->Forward({batch.samples}).toTensor();
    const at::Tensor soft = at::kl_div(at::log_softmax(s / t, 1),
                                       at::softmax(teacher_logits / t, 1), at::Reduction::Sum) /
                            s.size(0);
    const at::Tensor loss =
        0.5 * at::cross_entropy_loss(s, batch.targets.toTensor()) + 0.5 * t * t * soft;
    loss.backward();
    sgd.step();
    sgd.zero_grad(true);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace kd
