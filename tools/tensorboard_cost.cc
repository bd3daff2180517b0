// What TensorBoard events cost a run, measured in one process: the main job's KD step (its
// fashion_cnn teacher and student, widths 16 and 4, batch 128, synthetic 28x28 images, one
// thread, a DistillationBox driven step by step) against writing what //tools:distill's reporter
// writes for one logged step (loss, a term, lr, samples/s: four scalars) and for one epoch
// (train loss, three metrics, lr, seconds, samples/s: seven). Rounds alternate the two; the
// medians are printed with the events' share of a step, per logged step and spread over the
// main job's log_every_n_steps (50) and its 429-step epochs.
//
//   bazel run -c opt //tools:tensorboard_cost -- [--rounds=7] [--steps=20]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "distill/boxes/box.h"
#include "distill/data/data_loader.h"
#include "google/protobuf/text_format.h"
#include "tensorboard/event_writer.h"

ABSL_FLAG(int, rounds, 7, "alternating rounds of KD steps and event writes");
ABSL_FLAG(int, steps, 20, "KD steps per round (each round's event writes: 200 logged steps)");

namespace kd {
namespace {

constexpr char kConfig[] = R"pb(
  run { name: "cost" seed: 1 }
  datasets {
    id: "train"
    key: "synthetic"
    kwargs { name: "num_samples" integer: 4096 }
    kwargs { name: "num_classes" integer: 10 }
  }
  teacher {
    native {
      key: "fashion_cnn"
      kwargs { name: "width" integer: 16 }
    }
  }
  student {
    native {
      key: "fashion_cnn"
      kwargs { name: "width" integer: 4 }
    }
  }
  train {
    num_epochs: 1
    train_data_loader { dataset_id: "train" batch_size: 128 shuffle: true drop_last: true }
    optimizer {
      key: "SGD"
      kwargs { name: "lr" number: 0.05 }
    }
    criterion {
      terms {
        name: "kd"
        key: "KDLoss"
        kwargs { name: "temperature" number: 1 }
        kwargs { name: "alpha" number: 0.9 }
        inputs { arg: "student" source: STUDENT }
        inputs { arg: "teacher" source: TEACHER }
        inputs { arg: "targets" source: TARGETS }
      }
    }
    teacher_cache { mode: OFF }
    overlap_teacher: OFF
  }
)pb";

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main() {
  at::set_num_threads(1);
  DistillConfig config;
  google::protobuf::TextFormat::ParseFromString(kConfig, &config);
  const std::string dir = (std::filesystem::temp_directory_path() / "libkd_tb_cost").string();
  std::filesystem::remove_all(dir);
  auto box = MakeBox(config, {.run_dir = dir + "/run"});
  if (!box.ok()) {
    std::fprintf(stderr, "tensorboard_cost: %s\n", std::string(box.status().message()).c_str());
    return 1;
  }
  auto writer = tensorboard::EventWriter::Open(dir + "/tb");
  if (!writer.ok()) return 1;
  (void)(*box)->PreEpoch(0);
  DataLoader* loader = *(*box)->TrainLoader();
  std::optional<BatchStream> batches;
  batches.emplace(*loader);
  const int steps = absl::GetFlag(FLAGS_steps);
  constexpr int kLoggedSteps = 200;
  std::vector<double> step_seconds, logged_seconds, epoch_seconds;
  int64_t at = 0;
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) {
      if (batches->done()) {
        batches.reset();
        batches.emplace(*loader);
      }
      Batch batch = batches->Next();
      (void)(*box)->PreForward(batch);
      at::Tensor loss = *(*box)->Forward(batch);
      (void)(*box)->PostForward(loss);
    }
    step_seconds.push_back(Seconds(start) / steps);
    start = std::chrono::steady_clock::now();
    for (int i = 0; i < kLoggedSteps; ++i, ++at) {
      (void)(*writer)->Scalar("train/loss", 0.5, at);
      (void)(*writer)->Scalar("train/terms/kd", 0.5, at);
      (void)(*writer)->Scalar("train/lr", 0.05, at);
      (void)(*writer)->Scalar("train/samples_per_second", 16000, at);
    }
    logged_seconds.push_back(Seconds(start) / kLoggedSteps);
    start = std::chrono::steady_clock::now();
    for (int i = 0; i < kLoggedSteps; ++i) {
      for (const char* tag : {"train/epoch/train_loss", "train/epoch/val_accuracy",
                              "train/epoch/val_loss", "train/epoch/val_top5", "train/epoch/lr",
                              "train/epoch/seconds", "train/epoch/samples_per_second"}) {
        (void)(*writer)->Scalar(tag, 0.5, i);
      }
    }
    epoch_seconds.push_back(Seconds(start) / kLoggedSteps);
  }
  const double step = Median(step_seconds), logged = Median(logged_seconds),
               epoch = Median(epoch_seconds);
  std::printf("KD step (batch 128, one thread): %.3f ms (median of %zu rounds)\n", step * 1e3,
              step_seconds.size());
  std::printf("events of one logged step (4 scalars): %.1f us = %.3f%% of a step\n", logged * 1e6,
              100 * logged / step);
  std::printf("events of one epoch (7 scalars): %.1f us\n", epoch * 1e6);
  std::printf("per step in the main job (logged every 50 steps, 429-step epochs): %.4f%%\n",
              100 * (logged / 50 + epoch / 429) / step);
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return kd::Main();
}
