// A DistillationBox epoch against a hand-written libtorch loop doing the same work: the same
// teacher and student (fashion_cnn, widths 16 and 4), the same batches (synthetic 28x28, batch
// 128), teacher forward under no-grad, student forward, torchdistill's KD loss, backward, SGD
// step. One thread; epochs alternate box / hand and the median of the per-pair ratios of
// training seconds is printed (target <= 1.03).
//
//   bazel run -c opt //distill/boxes:box_benchmark -- --pairs=7
#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/optim/sgd.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "distill/boxes/box.h"
#include "distill/data/data_loader.h"
#include "distill/data/dataset.h"
#include "distill/models/model_registry.h"
#include "google/protobuf/text_format.h"

ABSL_FLAG(int, pairs, 7, "alternating (box, hand) epochs timed");
ABSL_FLAG(int, samples, 3840, "samples an epoch (batches of 128)");

namespace kd {
namespace {

using Clock = std::chrono::steady_clock;

std::string Config(int samples) {
  return absl::StrFormat(R"pb(
    run { seed: 1 log_every_n_steps: 1000000 }
    datasets {
      id: "train"
      key: "synthetic"
      kwargs { name: "num_samples" integer: %d }
      kwargs { name: "num_classes" integer: 10 }
    }
    teacher { native { key: "fashion_cnn" kwargs { name: "width" integer: 16 } } }
    student { native { key: "fashion_cnn" kwargs { name: "width" integer: 4 } } }
    train {
      num_epochs: 1
      train_data_loader { dataset_id: "train" batch_size: 128 shuffle: true drop_last: true }
      optimizer {
        key: "SGD"
        kwargs { name: "lr" number: 0.05 }
        kwargs { name: "momentum" number: 0.9 }
      }
      criterion {
        terms {
          key: "KDLoss"
          kwargs { name: "temperature" number: 4 }
          kwargs { name: "alpha" number: 0.5 }
          inputs { arg: "student" source: STUDENT }
          inputs { arg: "teacher" source: TEACHER }
          inputs { arg: "targets" source: TARGETS }
        }
      }
    }
    checkpoint { save_last: false save_best: false }
  )pb", samples);
}

// The box's training seconds for one epoch.
double BoxEpoch(const DistillConfig& config) {
  double seconds = 0;
  auto box = MakeBox(config, {.run_dir = "/tmp/libkd_box_benchmark",
                              .on_epoch = [&](const EpochReport& r) { seconds = r.seconds; }});
  if (!box.ok() || !(*box)->Run().ok()) std::abort();
  return seconds;
}

// The same epoch by hand.
double HandEpoch(int samples) {
  auto teacher = *MakeRegisteredModel("fashion_cnn", {{"width", int64_t{16}}});
  auto student = *MakeRegisteredModel("fashion_cnn", {{"width", int64_t{4}}});
  auto dataset = *MakeDataset("synthetic", {{"num_samples", int64_t{samples}},
                                            {"num_classes", int64_t{10}}});
  auto loader = *DataLoader::Create(dataset, {.batch_size = 128, .shuffle = true,
                                              .drop_last = true, .seed = 1});
  std::vector<at::Tensor> params;
  for (const auto& [name, p] : student->NamedParameters()) params.push_back(p);
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.05).momentum(0.9));
  teacher->SetTraining(false);
  student->SetTraining(true);
  const double t = 4;
  const Clock::time_point start = Clock::now();
  loader.SetEpoch(0);
  for (int64_t i = 0; i < loader.num_batches(); ++i) {
    const Batch batch = loader.GetBatch(i);
    at::Tensor teacher_logits;
    {
      at::NoGradGuard no_grad;
      teacher_logits = teacher->Forward({batch.samples}).toTensor();
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
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int Main() {
  at::set_num_threads(1);
  const int samples = absl::GetFlag(FLAGS_samples);
  DistillConfig config;
  if (!google::protobuf::TextFormat::ParseFromString(Config(samples), &config)) return 1;
  BoxEpoch(config);  // warm-up
  HandEpoch(samples);
  std::vector<double> ratios;
  double box_sum = 0, hand_sum = 0;
  for (int i = 0; i < absl::GetFlag(FLAGS_pairs); ++i) {
    // Alternate the order within pairs.
    double box = 0, hand = 0;
    if (i % 2 == 0) {
      box = BoxEpoch(config);
      hand = HandEpoch(samples);
    } else {
      hand = HandEpoch(samples);
      box = BoxEpoch(config);
    }
    box_sum += box;
    hand_sum += hand;
    ratios.push_back(box / hand);
  }
  std::sort(ratios.begin(), ratios.end());
  const int steps = samples / 128;
  std::cout << absl::StrFormat(
      "DistillationBox epoch / hand-written loop = %.3f (median of %d pairs; %d steps of 128, "
      "box %.1f steps/s, hand %.1f steps/s)\n",
      ratios[ratios.size() / 2], static_cast<int>(ratios.size()), steps,
      steps * ratios.size() / box_sum, steps * ratios.size() / hand_sum);
  return 0;
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return kd::Main();
}
