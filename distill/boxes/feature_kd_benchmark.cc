// Blockwise feature distillation of a causal LM: libkd's blockwise stage
// (`feature_distillation { mode: BLOCKWISE }`) against silverspoon-kd's BlockwiseDistiller, side
// by side in one run (the peer served over a pipe by peer_feature_kd_timing.py), at batch
// 2 x 32 tokens and 8 x 128. Prints per size the steps/s of each side and libkd's speed-up (the
// median of paired ratios), and the peak memory of a training step on each side and their
// ratio.
//
// Like for like:
// - the same tiny Llama pair, random init: teacher 4 layers x hidden 256 (intermediate 688,
//   4 heads), student 4 x 256 (intermediate 344, 4 heads: the same width, narrower MLPs),
//   vocabulary 4096. The peer makes them with transformers (LlamaConfig + from_config, seeded)
//   and save_pretrained's them; libkd's "hf_causal_lm" loads the same folders. Float32,
//   transformers' default attention (sdpa).
// - the same blocks: four alignments, the teacher's decoder layer model.layers.i -> the
//   student's model.layers.i, silverspoon-kd's default loss (mse), no projectors (the shapes
//   agree; auto_projector off on both sides). Each student layer runs on the inputs its teacher
//   layer was called with (hidden states, rotary tables, mask) against that layer's output;
//   a backward after each block (backward_per_block on both sides); the teacher's forward cut
//   after its last aligned layer on both sides (--auto_truncate: libkd's default, silverspoon-kd's
//   BlockwiseDistiller(auto_truncate=True); false runs the whole teacher on both).
// - the same batches: random ids (seeded) written here as a flat uint16 token file, read by
//   libkd's "token_file" and by the peer from the bytes, windows in order, never shuffled; the
//   teacher gets the ids alone. Before timing, the first 3 steps' losses (the sum over the
//   blocks) of fresh models on both sides are printed and must agree (relative 1e-4).
// - the same optimizer: AdamW lr 1e-3, betas (0.9, 0.999), eps 1e-8, no weight decay, the
//   per-parameter implementation (the Trainer's optim "adamw_torch"), a constant rate; each
//   alignment's parameters clipped on their own to norm 1.0 (silverspoon-kd: the Trainer's
//   max_grad_norm 1.0, which it gives each alignment; libkd: optimizer.max_grad_norm 1, which
//   the blockwise stage applies per alignment). silverspoon-kd keeps one AdamW per alignment,
//   libkd one parameter group per alignment in one AdamW: the same updates.
// - one intra-op thread each (--threads), tcmalloc each (libkd's binaries link it; the peer
//   LD_PRELOADs it). libkd's teacher cache and overlap off (the blockwise stage has neither).
//
// Timing: as lm_kd_benchmark's (distill/boxes/testing/peer_rounds.h): a round is an epoch of
// --steps batches on each side, alternating; libkd's box Run()s one epoch per round (a warm-up
// epoch first, an untimed last one), each timed from the end of one on_epoch callback to the
// next (its batch loading and per-epoch work included), and its callback asks the peer for a
// round of distiller.train(), timed from each step's on_step_begin to its on_step_end (not the
// fetching of its batch).
//
// Peak memory, counted the same way on both sides, untimed, on fresh models: the bytes of
// tensor storage that ATen's CPU allocators hand out (nbytes as asked, without the allocator's
// rounding or caching) since just before the side's models are loaded, less the bytes freed
// since: the models (libkd reads the weights into tensors; transformers maps the safetensors
// files through ATen's MapAllocator, counted at their size), the optimizer's state, the
// batches and each step's temporaries. The number is its highest value during training step 3
// (the optimizer's state exists from step 1); in brackets its rise over its value when the
// step began (the step's own temporaries and gradients: both sides' gradients are set to none
// after each step). The step is libkd's PreForward to PostForward (the step API, as Run's loop
// calls it) and silverspoon-kd's on_step_begin to on_step_end, the batch fetched before it on
// both sides. libkd: memdiag's TrackingAllocator installed just before the box is made (it
// sees no allocation made before); silverspoon-kd: torch.profiler with profile_memory=True from
// just before its distiller is made, the running total of its memory events (after a
// gc.collect(), so that no earlier object is freed inside). Neither counts what oneDNN or BLAS
// malloc internally, nor Python's or the C++ objects' own memory.
//
//   bazel run -c opt //distill/boxes:feature_kd_benchmark -- --pairs=5
//   (the peers: tools/install_deps.sh --peers)
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "distill/boxes/box.h"
#include "distill/boxes/testing/peer_rounds.h"
#include "distill/data/data_loader.h"
#include "google/protobuf/text_format.h"
#include "memdiag/tracking_allocator.h"
#include "testing/peer_process.h"
#include "testing/ratio_reporter.h"

ABSL_FLAG(int, pairs, 5, "timed rounds of each side per size, alternating (after a warm-up)");
ABSL_FLAG(int, steps, 20, "training steps a round (an epoch of its token file), each side");
ABSL_FLAG(int, threads, 1, "intra-op threads, each side");
ABSL_FLAG(bool, auto_truncate, true,
          "the teacher's forward stops after its last aligned layer, both sides (false: the "
          "whole teacher, its final norm and LM head included, runs on both)");
ABSL_FLAG(std::string, work_dir, "/tmp/libkd_feature_kd_benchmark",
          "where the models, token files, run folders and the peer's log go (replaced)");

namespace kd {
namespace {

namespace fs = std::filesystem;
using test::Rounds;
using Size = test::BatchSize;

constexpr int64_t kVocab = 4096;
constexpr int kLayers = 4;  // the teacher's and the student's decoder layers, aligned i -> i
// The first steps whose losses must agree before timing, and how closely (relative).
constexpr int kLossSteps = 3;
constexpr double kLossTolerance = 1e-4;
// The training step whose peak memory is measured (from 1).
constexpr int kMemoryStep = 3;

// Bytes counted since just before a side's models were loaded (see the top of this file).
struct StepMemory {
  int64_t peak = 0;   // the highest during step kMemoryStep
  int64_t start = 0;  // when that step began
};

struct SizeResult {
  Size size;
  Rounds libkd, silverspoon;
  StepMemory libkd_memory, silverspoon_memory;
};

std::string PeerLog() { return absl::GetFlag(FLAGS_work_dir) + "/peer.log"; }

// The box: silverspoon-kd's BlockwiseDistiller over the decoder layers, the peer's AdamW and
// clipping, `epochs` epochs of the token file's windows in order.
absl::StatusOr<DistillConfig> Config(const std::string& models, const std::string& tokens,
                                     const Size& size, int epochs) {
  std::string alignments;
  for (int i = 0; i < kLayers; ++i) {
    absl::StrAppendFormat(&alignments,
                          R"pb(alignments {
                                 teacher { path: "model.layers.%d" }
                                 student { path: "model.layers.%d" }
                                 auto_projector: false
                               })pb",
                          i, i);
  }
  const std::string text = absl::StrFormat(
      R"pb(
        run { name: "feature_kd" seed: 1 log_every_n_steps: 1000000 }
        datasets {
          id: "train"
          key: "token_file"
          kwargs { name: "path" str: "%s" }
          kwargs { name: "block_size" integer: %d }
          kwargs { name: "vocab_size" integer: %d }
        }
        teacher {
          native {
            key: "hf_causal_lm"
            kwargs { name: "path" str: "%s/teacher" }
          }
        }
        student {
          native {
            key: "hf_causal_lm"
            kwargs { name: "path" str: "%s/student" }
          }
        }
        train {
          name: "bkd"
          num_epochs: %d
          train_data_loader { dataset_id: "train" batch_size: %d }
          optimizer {
            key: "AdamW"
            kwargs { name: "lr" number: 0.001 }
            kwargs {
              name: "betas"
              numbers { values: [ 0.9, 0.999 ] }
            }
            kwargs { name: "eps" number: 1e-8 }
            kwargs { name: "weight_decay" number: 0 }
            max_grad_norm: 1
          }
          teacher_cache { mode: OFF }
          overlap_teacher: OFF
          feature_distillation { mode: BLOCKWISE %s backward_per_block: true auto_truncate: %s }
        }
        checkpoint { save_last: false save_best: false }
      )pb",
      tokens, size.block, kVocab, models, models, epochs, size.batch, alignments,
      absl::GetFlag(FLAGS_auto_truncate) ? "true" : "false");
  DistillConfig config;
  if (!google::protobuf::TextFormat::ParseFromString(text, &config)) {
    return absl::InternalError("the benchmark's own config does not parse");
  }
  return config;
}

// The peer's request `what` for `size`'s token file: "what TOKENS BATCH BLOCK STEPS TRUNCATE".
std::string Request(const std::string& what, const std::string& tokens, const Size& size,
                    int steps) {
  return absl::StrCat(what, " ", tokens, " ", size.batch, " ", size.block, " ", steps, " ",
                      absl::GetFlag(FLAGS_auto_truncate) ? 1 : 0);
}

// Fresh models on both sides, the same first batches: the losses of the first steps must agree
// (the weights, batches, blocks, losses, clipping and optimizer are the same), or the timing
// compares other work.
absl::Status CheckLosses(test::PeerProcess& peer, const DistillConfig& config,
                         const std::string& tokens, const Size& size,
                         const std::vector<double>& peer_params) {
  const std::string run_dir = absl::StrCat(absl::GetFlag(FLAGS_work_dir), "/check_", size.file());
  KD_ASSIGN_OR_RETURN(std::unique_ptr<Box> box,
                      MakeBox(config, {.run_dir = run_dir, .overwrite = true}));
  KD_RETURN_IF_ERROR(test::CheckSameModels(*box, peer_params));
  KD_ASSIGN_OR_RETURN(std::vector<double> ours, test::FirstLosses(*box, kLossSteps));
  KD_ASSIGN_OR_RETURN(
      std::vector<double> theirs,
      test::AskPeer(peer, Request("losses", tokens, size, kLossSteps), kLossSteps, PeerLog()));
  const double difference = test::MaxRelativeDifference(ours, theirs);
  std::printf(
      "%-8s first %d steps' losses: libkd %s, silverspoon-kd %s; max relative difference "
      "%.1e\n",
      size.name().c_str(), kLossSteps, test::FormatLosses(ours).c_str(),
      test::FormatLosses(theirs).c_str(), difference);
  std::fflush(stdout);
  if (!(difference <= kLossTolerance)) {
    return absl::InternalError(absl::StrFormat(
        "the losses differ by more than %.0e: the sides do not compute the same thing",
        kLossTolerance));
  }
  return absl::OkStatus();
}

// libkd's step memory: the tracking allocator from just before the box is made, steps 1 to
// kMemoryStep through the step API.
absl::StatusOr<StepMemory> LibkdStepMemory(const DistillConfig& config, const Size& size) {
  TrackingAllocator& tracker = TrackingAllocator::Install();
  const int64_t base = tracker.live_bytes();
  StepMemory memory;
  absl::Status status = [&]() -> absl::Status {
    KD_ASSIGN_OR_RETURN(std::unique_ptr<Box> box,
                        MakeBox(config, {.run_dir = absl::StrCat(absl::GetFlag(FLAGS_work_dir),
                                                                 "/memory_", size.file()),
                                         .overwrite = true}));
    KD_RETURN_IF_ERROR(box->PreEpoch(0));
    KD_ASSIGN_OR_RETURN(DataLoader * loader, box->TrainLoader());
    BatchStream batches(*loader);
    for (int step = 1; step <= kMemoryStep; ++step) {
      if (batches.done()) return absl::InternalError("fewer batches than the measured step");
      Batch batch = batches.Next();
      if (step == kMemoryStep) {
        tracker.ResetPeak();
        memory.start = tracker.live_bytes() - base;
      }
      KD_RETURN_IF_ERROR(box->PreForward(batch));
      KD_ASSIGN_OR_RETURN(at::Tensor loss, box->Forward(batch));
      KD_RETURN_IF_ERROR(box->PostForward(loss));
      if (step == kMemoryStep) memory.peak = tracker.peak_bytes() - base;
    }
    return absl::OkStatus();
  }();
  TrackingAllocator::Uninstall();
  KD_RETURN_IF_ERROR(status);
  return memory;
}

// One size: the losses' check, each side's step memory, then the timed rounds (libkd's Run()
// epochs, the peer's rounds between them).
absl::StatusOr<SizeResult> MeasureSize(test::PeerProcess& peer, const std::string& models,
                                       const Size& size, const std::vector<double>& peer_params) {
  const int steps = absl::GetFlag(FLAGS_steps), pairs = absl::GetFlag(FLAGS_pairs);
  const std::string dir = absl::GetFlag(FLAGS_work_dir);
  const std::string tokens = absl::StrCat(dir, "/tokens_", size.file(), ".bin");
  KD_RETURN_IF_ERROR(test::WriteTokens(tokens, steps * size.batch * size.block, kVocab,
                                       static_cast<uint32_t>(1000 * size.batch + size.block)));
  KD_ASSIGN_OR_RETURN(DistillConfig config, Config(models, tokens, size, 2 + pairs));
  KD_RETURN_IF_ERROR(CheckLosses(peer, config, tokens, size, peer_params));

  SizeResult result{.size = size};
  KD_ASSIGN_OR_RETURN(result.libkd_memory, LibkdStepMemory(config, size));
  KD_ASSIGN_OR_RETURN(
      std::vector<double> memory,
      test::AskPeer(peer, Request("memory", tokens, size, kMemoryStep), 2, PeerLog()));
  result.silverspoon_memory = {.peak = static_cast<int64_t>(memory[0]),
                               .start = static_cast<int64_t>(memory[1])};

  const std::string round = Request("blockwise", tokens, size, steps);
  auto peer_rounds = [&](int64_t, bool warmup) -> absl::Status {
    KD_ASSIGN_OR_RETURN(std::vector<double> t, test::AskPeer(peer, round, 2, PeerLog()));
    if (!warmup) {
      result.silverspoon.wall.push_back(t[0]);
      result.silverspoon.cpu.push_back(t[1]);
    }
    return absl::OkStatus();
  };
  KD_ASSIGN_OR_RETURN(
      result.libkd,
      test::RunPairedRounds(config, absl::StrCat(dir, "/run_", size.file()), pairs, peer_rounds));
  return result;
}

double MiB(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

std::string Memory(const StepMemory& m) {
  return absl::StrFormat("%.1f (%.1f)", MiB(m.peak), MiB(m.peak - m.start));
}

// "lo-hi" of the pairs' other[i] / libkd[i].
std::string Range(const std::vector<double>& libkd, const std::vector<double>& other) {
  std::vector<double> ratios;
  for (size_t i = 0; i < libkd.size(); ++i) ratios.push_back(other[i] / libkd[i]);
  if (ratios.empty()) return "-";
  const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
  return absl::StrFormat("%.2fx-%.2fx", *lo, *hi);
}

void PrintTable(const std::vector<SizeResult>& results) {
  const int steps = absl::GetFlag(FLAGS_steps);
  std::printf(
      "\nlibkd (%s) against silverspoon-kd's BlockwiseDistiller (tcmalloc by LD_PRELOAD); %d "
      "decoder layers aligned i -> i (mse), a backward per block, each alignment clipped to "
      "1.0; the teacher %s; %d intra-op thread(s) each; %d steps a round, medians of %zu "
      "rounds; speed-up: the median of paired ratios of wall time (CPU time in brackets); "
      "memory: the peak of ATen's CPU tensor bytes during step %d, counted from just before "
      "the models were loaded (in brackets its rise over the step's start), MiB\n",
      test::MallocName(), kLayers,
      absl::GetFlag(FLAGS_auto_truncate) ? "cut after its last aligned layer (auto_truncate)"
                                         : "run whole",
      absl::GetFlag(FLAGS_threads), steps,
      results.empty() ? size_t{0} : results[0].libkd.wall.size(), kMemoryStep);
  std::printf("%-8s | %-23s | %-16s | %-47s\n", "", "steps/s", "libkd's speed-up",
              "peak memory, MiB (rise)");
  std::printf("%-8s | %9s %13s | %16s | %13s %15s %17s\n", "size", "libkd", "silverspoon",
              "wall (CPU)", "libkd", "silverspoon", "libkd/silverspoon");
  for (const SizeResult& r : results) {
    const double libkd = steps / test::Median(r.libkd.wall);
    const double silverspoon = steps / test::Median(r.silverspoon.wall);
    const std::string speed_up =
        absl::StrFormat("%.2fx (%.2fx)", test::SpeedUp(r.libkd.wall, r.silverspoon.wall),
                        test::SpeedUp(r.libkd.cpu, r.silverspoon.cpu));
    const StepMemory& a = r.libkd_memory;
    const StepMemory& b = r.silverspoon_memory;
    const std::string ratio = absl::StrFormat(
        "%.2f (%.2f)", static_cast<double>(a.peak) / static_cast<double>(b.peak),
        static_cast<double>(a.peak - a.start) / static_cast<double>(b.peak - b.start));
    std::printf("%-8s | %9.2f %13.2f | %16s | %13s %15s %17s\n", r.size.name().c_str(), libkd,
                silverspoon, speed_up.c_str(), Memory(a).c_str(), Memory(b).c_str(), ratio.c_str());
  }
  for (const SizeResult& r : results) {
    std::printf("%-8s libkd's speed-up over the pairs: wall %s, CPU %s\n", r.size.name().c_str(),
                Range(r.libkd.wall, r.silverspoon.wall).c_str(),
                Range(r.libkd.cpu, r.silverspoon.cpu).c_str());
  }
  for (const SizeResult& r : results) {
    std::printf(
        "%-8s bytes at step %d's start / peak: libkd %lld / %lld, silverspoon-kd %lld / %lld\n",
        r.size.name().c_str(), kMemoryStep, static_cast<long long>(r.libkd_memory.start),
        static_cast<long long>(r.libkd_memory.peak),
        static_cast<long long>(r.silverspoon_memory.start),
        static_cast<long long>(r.silverspoon_memory.peak));
  }
}

absl::Status Main() {
  const int threads = absl::GetFlag(FLAGS_threads);
  if (absl::GetFlag(FLAGS_pairs) < 1 || absl::GetFlag(FLAGS_steps) < kLossSteps ||
      absl::GetFlag(FLAGS_steps) < kMemoryStep || threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("need --pairs >= 1, --steps >= ", std::max(kLossSteps, kMemoryStep),
                     " and --threads >= 1"));
  }
  at::set_num_threads(threads);
  const std::string dir = absl::GetFlag(FLAGS_work_dir);
  std::error_code error;
  fs::remove_all(dir, error);
  fs::create_directories(dir + "/models", error);
  if (error) return absl::InternalError(absl::StrCat("cannot make ", dir, ": ", error.message()));

  test::PeerProcess peer;
  KD_RETURN_IF_ERROR(
      test::StartPeer(peer, "distill/boxes/peer_feature_kd_timing.py", threads, PeerLog()));
  // The peer makes the models once; libkd reads the same folders.
  const std::string models = dir + "/models";
  KD_ASSIGN_OR_RETURN(std::vector<double> params,
                      test::AskPeer(peer, "models " + models, 2, PeerLog()));
  std::printf(
      "models: teacher %.0f parameters, student %.0f (Llama, %d layers x hidden 256 each, "
      "intermediate 688 / 344, vocabulary %ld, random init, transformers' save_pretrained; "
      "both sides load the same files)\n",
      params[0], params[1], kLayers, static_cast<long>(kVocab));
  std::vector<SizeResult> results;
  for (const Size& size : {Size{2, 32}, Size{8, 128}}) {
    KD_ASSIGN_OR_RETURN(SizeResult r, MeasureSize(peer, models, size, params));
    results.push_back(std::move(r));
  }
  PrintTable(results);
  return absl::OkStatus();
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = kd::Main();
  if (!status.ok()) {
    std::fprintf(stderr, "feature_kd_benchmark: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
