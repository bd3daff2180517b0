// What num_workers buys: epochs of a training step over an augmentation-heavy pipeline with 0,
// 1 and 2 worker threads (kd::BatchStream), in rounds that alternate the three, wall time (the
// workers run on other cores). The step is the main job's student (fashion_cnn, width 4):
// forward, cross-entropy, backward and an SGD step on batches of 128, one intra-op thread. The
// pipeline is Fashion-MNIST (the synthetic set where it is not installed) with a random affine
// transform per image (rotation +-15 degrees, scale 0.9-1.1, translation +-2 pixels, bilinear,
// by affine_grid + grid_sample: what torchvision's RandomAffine does), then crop and flip. Also
// prints what assembling the batches alone costs, so the share a worker can hide is known.
//
//   bazel run -c opt //distill/data:workers_benchmark [-- --rounds=5 --batches=64]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/sgd.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "distill/data/data_loader.h"
#include "distill/data/dataset.h"
#include "distill/models/model_registry.h"
#include "testing/ratio_reporter.h"

ABSL_FLAG(int, rounds, 5, "rounds of (0, 1, 2 workers)");
ABSL_FLAG(int, batches, 64, "batches of 128 an epoch");

namespace kd {
namespace {

// `data` with a random affine transform of each image, drawn from the batch's generator.
class RandomAffine final : public Dataset {
 public:
  explicit RandomAffine(std::shared_ptr<Dataset> data) : data_(std::move(data)) {}
  int64_t size() const override { return data_->size(); }
  int64_t num_classes() const override { return data_->num_classes(); }

 protected:
  Samples GetSamples(const at::Tensor& indices, at::Generator& generator) const override {
    Batch batch = data_->Get(indices, generator);
    const at::Tensor x = batch.samples.toTensor();
    const int64_t b = x.size(0);
    const at::Tensor angle = (at::rand({b}, generator) * 2 - 1) * (15.0 * M_PI / 180.0);
    const at::Tensor scale = at::rand({b}, generator) * 0.2 + 0.9;
    const at::Tensor shift = (at::rand({b, 2}, generator) * 2 - 1) * (2.0 / 14.0);
    const at::Tensor cos = angle.cos() / scale, sin = angle.sin() / scale;
    const at::Tensor theta = at::stack({at::stack({cos, -sin, shift.select(1, 0)}, 1),
                                        at::stack({sin, cos, shift.select(1, 1)}, 1)},
                                       1);  // (B, 2, 3)
    const at::Tensor grid = at::affine_grid_generator(theta, x.sizes(), /*align_corners=*/false);
    return {at::grid_sampler(x, grid, /*interpolation_mode=*/0, /*padding_mode=*/0,
                             /*align_corners=*/false),
            batch.targets.toTensor()};
  }

 private:
  std::shared_ptr<Dataset> data_;
};

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

int Main() {
  at::set_num_threads(1);
  absl::StatusOr<std::shared_ptr<Dataset>> base =
      MakeDataset("fashion_mnist", {{"mean", 0.2860},
                                    {"std", 0.3530},
                                    {"random_crop_padding", int64_t{2}},
                                    {"horizontal_flip", true}});
  const char* source = "Fashion-MNIST";
  if (!base.ok()) {
    base = MakeDataset("synthetic", {{"num_samples", int64_t{16384}}});
    source = "synthetic (Fashion-MNIST is not installed)";
  }
  auto data = std::make_shared<RandomAffine>(*base);
  absl::StatusOr<std::unique_ptr<Model>> student =
      MakeRegisteredModel("fashion_cnn", {{"width", int64_t{4}}});
  if (!student.ok()) return 1;
  Model& model = **student;
  model.SetTraining(true);
  std::vector<at::Tensor> params;
  for (const auto& [name, p] : model.NamedParameters()) params.push_back(p);
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.05).momentum(0.9));
  const int batches = absl::GetFlag(FLAGS_batches);

  // One epoch with `workers`: train (or only assemble the batches); wall seconds.
  auto epoch = [&](int workers, bool train, int64_t e) {
    absl::StatusOr<DataLoader> loader = DataLoader::Create(
        data,
        {.batch_size = 128, .shuffle = true, .drop_last = true, .seed = 1, .num_workers = workers});
    loader->SetEpoch(e);
    const auto start = std::chrono::steady_clock::now();
    BatchStream stream(*loader);
    for (int i = 0; i < batches && !stream.done(); ++i) {
      Batch batch = stream.Next();
      if (!train) continue;
      const at::Tensor logits = model.Forward({batch.samples}).toTensor();
      at::cross_entropy_loss(logits, batch.targets.toTensor()).backward();
      sgd.step();
      sgd.zero_grad();
    }
    return Seconds(start);
  };
  epoch(0, true, 0);  // warm-up
  std::vector<double> data_only, t0, t1, t2, r1, r2;
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    data_only.push_back(epoch(0, false, round));
    const double a = epoch(0, true, round), b = epoch(1, true, round), c = epoch(2, true, round);
    t0.push_back(a);
    t1.push_back(b);
    t2.push_back(c);
    r1.push_back(b / a);
    r2.push_back(c / a);
  }
  std::printf(
      "%s, random affine + crop + flip, %d batches of 128, fashion_cnn width 4 steps, one "
      "intra-op thread, %d rounds, wall time, medians:\n"
      "  assembling the batches alone: %.3f s an epoch (%.2f ms a batch)\n"
      "  an epoch of steps: 0 workers %.3f s, 1 worker %.3f s, 2 workers %.3f s\n"
      "  with workers / without: 1 worker %.3f, 2 workers %.3f (median of per-round ratios)\n",
      source, batches, absl::GetFlag(FLAGS_rounds), test::Median(data_only),
      1000 * test::Median(data_only) / batches, test::Median(t0), test::Median(t1),
      test::Median(t2), test::Median(r1), test::Median(r2));
  return 0;
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return kd::Main();
}
