// A DistillationBox epoch against a hand-written libtorch loop doing the same
// work: the same teacher and student (fashion_cnn, widths 16 and 4), the same
// batches (synthetic 28x28, --batch, 128 by default), teacher forward under
// no-grad, student forward, torchdistill's KD loss, backward, SGD step. One
// thread; epochs alternate box / hand and the median of the per-pair ratios of
// training seconds is printed (target <= 1.03).
//
// With --peers, the other side is torchdistill's own DistillationBox instead,
// in a Python process (peer_box_timing.py, libkd's venv python): the same
// models (its fashion_cnn has the same layers; both sides' parameter counts are
// printed and must be equal), synthetic data, batch size, KDLoss, SGD and one
// thread, timed over an epoch of its own training loop (pre_epoch_process,
// forward_process + post_forward_process per batch, post_epoch_process). Epochs
// alternate libkd / torchdistill and the median of the paired speed ratios is
// printed.
//
// The box's teacher cache and overlap (StageConfig.teacher_cache, overlap_teacher) are off, as
// the hand loop and torchdistill have neither; --teacher_extras leaves them at their defaults
// (AUTO: the overlap where a core is idle).
//
// With --teacher=FILE both sides' teacher is that TorchScript file (the same fashion_cnn,
// scripted: peer_box_timing.py --save_teacher=FILE) instead of the native model, and with
// --optimize_teacher it is optimized for inference: the box's config sets the teacher's
// optimize_for_inference, the hand loop runs torch::jit::freeze + optimize_for_inference on it
// outside the timing (conv-BN folding, MKLDNN prepacking). With --peers, torchdistill keeps its
// Python teacher of the same layers: what an optimized teacher saves a libkd run.
//
//   bazel run -c opt //distill/boxes:box_benchmark -- --pairs=7
//   bazel run -c opt //distill/boxes:box_benchmark -- --peers --batch=32
//   bazel run -c opt //distill/boxes:box_benchmark -- --peers --teacher=/tmp/t.pt
//       --optimize_teacher    (one line)
//   bazel run -c opt //distill/boxes:box_benchmark -- --peers --peer_tcmalloc
//       --fashion_mnist_epochs=3 --batch=16 --threads=1 [--teacher_extras [--overlap=false]]
//   (--peers needs tools/install_deps.sh --peers)
//   bazel run -c opt //distill/boxes:box_benchmark -- --step_api_epochs=3
//       (Run() against a hand loop over the step API: the teacher cache serves both)

#include <algorithm>
#include <chrono>
#include <map>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "distill/boxes/box.h"
#include "distill/boxes/internal/hand_kd_loop.h"
#include "distill/boxes/internal/step_api_loop.h"
#include "distill/data/data_loader.h"
#include "distill/data/dataset.h"
#include "distill/models/model_registry.h"
#include "google/protobuf/text_format.h"
#include "testing/peer_process.h"

ABSL_FLAG(int, pairs, 7,
          "alternating (box, hand) or, with --peers, (libkd, torchdistill) "
          "epochs timed");
ABSL_FLAG(int, samples, 3840, "samples an epoch");
ABSL_FLAG(int, batch, 128, "batch size");
ABSL_FLAG(bool, peer_tcmalloc, false,
          "with --peers: run torchdistill on tcmalloc too (LD_PRELOAD of Debian's "
          "libtcmalloc_minimal.so.4), as libkd's binaries are linked");
ABSL_FLAG(std::string, teacher, "",
          "the teacher: this TorchScript fashion_cnn (width 16) instead of the native one "
          "(peer_box_timing.py --save_teacher=FILE writes one)");
ABSL_FLAG(bool, optimize_teacher, false,
          "with --teacher: the teacher optimized for inference (optimize_for_inference)");
ABSL_FLAG(int, fashion_mnist_epochs, 0,
          "with --peers: both sides train this many epochs on Fashion-MNIST's first --samples "
          "training images (Debian's files; normalised, flipped at random as the main job's), "
          "timed over the whole run, instead of one epoch of synthetic images");
ABSL_FLAG(int, threads, 1, "intra-op threads, both sides");
ABSL_FLAG(int, peer_threads, 0,
          "with --fashion_mnist_epochs: torchdistill's intra-op threads, when not --threads (to "
          "give it the cores libkd's teacher thread uses: --threads=1 --peer_threads=2)");
ABSL_FLAG(bool, teacher_extras, false,
          "leave the box's teacher cache and overlap at their defaults (AUTO): work the hand "
          "loop and torchdistill do not do (off by default: like for like)");
ABSL_FLAG(bool, overlap, true,
          "with --teacher_extras: false keeps the teacher cache only (overlap_teacher OFF), "
          "so libkd runs on exactly --threads threads");
ABSL_FLAG(int, step_api_epochs, 0,
          "instead: Run() against a hand loop over the step API (box.h), this many epochs of "
          "the same config each, the teacher cache at its default (AUTO: on, so later epochs "
          "hit it); prints the hand loop's seconds / Run()'s");
ABSL_FLAG(bool, peers, false,
          "compare with torchdistill's own DistillationBox (libkd's venv "
          "python with torchdistill) instead of the hand-written loop");

namespace kd {
namespace {

// The run: one epoch of `samples` synthetic images, or with `epochs` > 0 that many epochs of
// Fashion-MNIST's first `samples` training images, flipped at random.
std::string Config(int samples, int batch, int epochs) {
  const std::string data =
      epochs > 0 ? absl::StrFormat(R"pb(
                                     datasets {
                                       id: "train"
                                       key: "fashion_mnist"
                                       kwargs { name: "split" str: "train" }
                                       kwargs { name: "mean" number: 0.2860 }
                                       kwargs { name: "std" number: 0.3530 }
                                       kwargs { name: "horizontal_flip" boolean: true }
                                       subset { stop: %d }
                                     })pb",
                                   samples)
                 : absl::StrFormat(R"pb(
                                     datasets {
                                       id: "train"
                                       key: "synthetic"
                                       kwargs { name: "num_samples" integer: %d }
                                       kwargs { name: "num_classes" integer: 10 }
                                     })pb",
                                   samples);
  return absl::StrFormat(
      R"pb(
        run { seed: 1 log_every_n_steps: 1000000 } %s
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
          num_epochs: %d
          train_data_loader { dataset_id: "train" batch_size: %d shuffle: true drop_last: true }
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
      )pb",
      data, std::max(epochs, 1), batch);
}

// The box's training seconds, over its epochs.
double BoxEpoch(const DistillConfig& config) {
  double seconds = 0;
  // Each epoch is a run of its own in one folder: the last one's is replaced.
  auto box = MakeBox(config, {.run_dir = "/tmp/libkd_box_benchmark",
                              .overwrite = true,
                              .on_epoch = [&](const EpochReport& r) { seconds += r.seconds; }});
  const absl::Status ran = box.ok() ? (*box)->Run().status() : box.status();
  if (!ran.ok()) {
    std::fprintf(stderr, "box_benchmark: %s\n", std::string(ran.message()).c_str());
    std::exit(1);
  }
  return seconds;
}

int64_t NumParams(int64_t width) {
  auto model = *MakeRegisteredModel("fashion_cnn", {{"width", width}});
  int64_t n = 0;
  for (const auto& [name, p] : model->NamedParameters()) n += p.numel();
  return n;
}

// The teacher's parameters: --teacher's file (before any optimization), else the native one's.
int64_t TeacherParams() {
  const std::string file = absl::GetFlag(FLAGS_teacher);
  if (file.empty()) return NumParams(16);
  int64_t n = 0;
  for (const auto& p : torch::jit::load(file).parameters()) n += p.numel();
  return n;
}

// libkd's DistillationBox against torchdistill's, alternating epochs.
int PeersMain(const DistillConfig& config, int samples, int batch) {
  // torchdistill's DistillationBox, timed by peer_box_timing.py, which answers one request
  // line at a time: libkd's own epochs run while it waits, so both sides see the same machine
  // state.
  test::PeerProcess peer;
  test::PeerProcess::Options peer_options{.script = "distill/boxes/peer_box_timing.py"};
  if (absl::GetFlag(FLAGS_peer_tcmalloc)) {
    peer_options.env.push_back(test::PreloadTcmalloc());
  }
  if (!peer.Start(peer_options)) {
    std::cerr << "could not start the peer script\n";
    return 1;
  }
  const std::optional<std::vector<double>> params = peer.Ask("params");
  if (!params.has_value() || params->size() != 2) {
    std::cerr << "the peer script did not answer (is torchdistill installed? "
                 "tools/install_deps.sh --peers)\n";
    return 1;
  }
  const int64_t teacher = TeacherParams(), student = NumParams(4);
  std::cout << absl::StrFormat(
      "parameters: teacher libkd %d, torchdistill %d; student libkd %d, "
      "torchdistill %d\n",
      teacher, static_cast<int64_t>((*params)[0]), student, static_cast<int64_t>((*params)[1]));
  if (teacher != static_cast<int64_t>((*params)[0]) ||
      student != static_cast<int64_t>((*params)[1])) {
    std::cerr << "the models differ: not a fair comparison\n";
    return 1;
  }
  const int epochs = absl::GetFlag(FLAGS_fashion_mnist_epochs);
  const int peer_threads = absl::GetFlag(FLAGS_peer_threads) > 0 ? absl::GetFlag(FLAGS_peer_threads)
                                                                 : absl::GetFlag(FLAGS_threads);
  const std::string request =
      epochs > 0 ? absl::StrCat("fmnist ", samples, " ", batch, " ", epochs, " ", peer_threads)
                 : absl::StrCat("epoch ", samples, " ", batch);
  auto peer_epoch = [&](double& loader) {
    const std::optional<std::vector<double>> answer = peer.Ask(request);
    if (!answer.has_value() || answer->size() != 2) {
      std::cerr << "the peer script failed on \"" << request << "\"\n";
      std::exit(1);
    }
    loader = (*answer)[1];
    return (*answer)[0];
  };
  double loader = 0;
  BoxEpoch(config);  // warm-up
  peer_epoch(loader);
  std::vector<double> ratios;
  double libkd_sum = 0, peer_sum = 0, loader_sum = 0;
  for (int i = 0; i < absl::GetFlag(FLAGS_pairs); ++i) {
    // Alternate the order within pairs.
    double libkd = 0, torchdistill = 0;
    if (i % 2 == 0) {
      libkd = BoxEpoch(config);
      torchdistill = peer_epoch(loader);
    } else {
      torchdistill = peer_epoch(loader);
      libkd = BoxEpoch(config);
    }
    libkd_sum += libkd;
    peer_sum += torchdistill;
    loader_sum += loader;
    // torchdistill's seconds / libkd's = libkd's steps/s / torchdistill's.
    ratios.push_back(torchdistill / libkd);
  }
  std::sort(ratios.begin(), ratios.end());
  const int steps = std::max(epochs, 1) * (samples / batch);
  const double n = static_cast<double>(ratios.size());
  std::cout << absl::StrFormat(
      "libkd DistillationBox %.1f steps/s (malloc: %s), torchdistill DistillationBox "
      "%.1f steps/s (malloc: %s; %.0f%% of its time in its data loader); %d steps of %d "
      "(%s), intra-op threads libkd %d, torchdistill %d; libkd's teacher cache and overlap "
      "%s\n"
      "libkd / torchdistill steps/s = %.3f (median of %d pairs; min %.3f, "
      "max %.3f)\n",
      steps * n / libkd_sum, test::MallocName(), steps * n / peer_sum,
      absl::GetFlag(FLAGS_peer_tcmalloc) ? "tcmalloc" : "glibc", 100 * loader_sum / peer_sum, steps,
      batch, epochs > 0 ? absl::StrCat(epochs, " epochs of Fashion-MNIST, flipped") : "synthetic",
      absl::GetFlag(FLAGS_threads), epochs > 0 ? peer_threads : 1,
      !absl::GetFlag(FLAGS_teacher_extras) ? "off"
      : absl::GetFlag(FLAGS_overlap)       ? "on (AUTO)"
                                           : "cache on (AUTO), overlap off",
      ratios[ratios.size() / 2], static_cast<int>(ratios.size()), ratios.front(), ratios.back());
  return 0;
}

// Run() against the step API's hand loop over the same config, alternating.
int StepApiMain(DistillConfig config, int epochs) {
  config.mutable_train()->set_num_epochs(epochs);
  config.mutable_train()->clear_teacher_cache();  // AUTO
  // The step API is sequential: Run() without the overlap, like for like; the look-ahead (which
  // needs the batches ahead of the step) is Run()'s alone and stays at its default.
  config.mutable_train()->set_overlap_teacher(OFF);
  BoxEpoch(config);  // warm-up
  StepApiRun(config);
  std::vector<double> ratios;
  for (int i = 0; i < absl::GetFlag(FLAGS_pairs); ++i) {
    double run = 0, hand = 0;
    if (i % 2 == 0) {
      run = BoxEpoch(config);
      hand = StepApiRun(config);
    } else {
      hand = StepApiRun(config);
      run = BoxEpoch(config);
    }
    ratios.push_back(hand / run);
  }
  std::sort(ratios.begin(), ratios.end());
  std::cout << absl::StrFormat(
      "step-API hand loop / Run() seconds = %.3f (median of %d pairs; min %.3f, max %.3f; %d "
      "epochs of %d steps, teacher cache AUTO, overlap off)\n",
      ratios[ratios.size() / 2], static_cast<int>(ratios.size()), ratios.front(), ratios.back(),
      epochs, absl::GetFlag(FLAGS_samples) / absl::GetFlag(FLAGS_batch));
  return 0;
}

int Main() {
  at::set_num_threads(std::max(1, absl::GetFlag(FLAGS_threads)));
  const int samples = absl::GetFlag(FLAGS_samples);
  const int batch = absl::GetFlag(FLAGS_batch);
  if (batch < 1 || samples < batch || absl::GetFlag(FLAGS_pairs) < 1) {
    std::cerr << "need --batch >= 1, --samples >= --batch and --pairs >= 1\n";
    return 2;
  }
  DistillConfig config;
  if (absl::GetFlag(FLAGS_peers) && absl::GetFlag(FLAGS_fashion_mnist_epochs) == 0 &&
      (absl::GetFlag(FLAGS_threads) != 1 || absl::GetFlag(FLAGS_peer_threads) > 0)) {
    std::cerr << "--threads and --peer_threads with --peers need --fashion_mnist_epochs (the "
                 "synthetic epoch runs torchdistill on one thread)\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_fashion_mnist_epochs) > 0 && !absl::GetFlag(FLAGS_peers)) {
    std::cerr << "--fashion_mnist_epochs is for --peers\n";
    return 2;
  }
  if (!google::protobuf::TextFormat::ParseFromString(
          Config(samples, batch, absl::GetFlag(FLAGS_fashion_mnist_epochs)), &config)) {
    return 1;
  }
  if (!absl::GetFlag(FLAGS_teacher_extras)) {  // the teacher on every row, on this thread
    config.mutable_train()->mutable_teacher_cache()->set_mode(OFF);
    config.mutable_train()->set_overlap_teacher(OFF);
  } else if (!absl::GetFlag(FLAGS_overlap)) {
    config.mutable_train()->set_overlap_teacher(OFF);
  }
  if (const std::string file = absl::GetFlag(FLAGS_teacher); !file.empty()) {
    config.mutable_teacher()->set_torchscript(file);
    config.mutable_teacher()->set_optimize_for_inference(absl::GetFlag(FLAGS_optimize_teacher));
  }
  if (absl::GetFlag(FLAGS_step_api_epochs) > 0) {
    return StepApiMain(config, absl::GetFlag(FLAGS_step_api_epochs));
  }
  if (absl::GetFlag(FLAGS_peers)) return PeersMain(config, samples, batch);
  BoxEpoch(config);  // warm-up
  HandKdEpoch(samples, batch, absl::GetFlag(FLAGS_teacher), absl::GetFlag(FLAGS_optimize_teacher));
  std::vector<double> ratios;
  double box_sum = 0, hand_sum = 0;
  for (int i = 0; i < absl::GetFlag(FLAGS_pairs); ++i) {
    // Alternate the order within pairs.
    double box = 0, hand = 0;
    if (i % 2 == 0) {
      box = BoxEpoch(config);
      hand = HandKdEpoch(samples, batch, absl::GetFlag(FLAGS_teacher),
                         absl::GetFlag(FLAGS_optimize_teacher));
    } else {
      hand = HandKdEpoch(samples, batch, absl::GetFlag(FLAGS_teacher),
                         absl::GetFlag(FLAGS_optimize_teacher));
      box = BoxEpoch(config);
    }
    box_sum += box;
    hand_sum += hand;
    ratios.push_back(box / hand);
  }
  std::sort(ratios.begin(), ratios.end());
  const int steps = samples / batch;
  std::cout << absl::StrFormat(
      "DistillationBox epoch / hand-written loop = %.3f (median of %d pairs; "
      "%d steps of %d, box %.1f steps/s, hand %.1f steps/s)\n",
      ratios[ratios.size() / 2], static_cast<int>(ratios.size()), steps, batch,
      steps * ratios.size() / box_sum, steps * ratios.size() / hand_sum);
  return 0;
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return kd::Main();
}
