// Response-based distillation of a causal LM: libkd's DistillationBox against silverspoon-kd's
// ResponseBasedDistiller and against a plain PyTorch loop of the same kernels, side by side in
// one run (the two Python columns served over a pipe by peer_lm_kd_timing.py), at batch 2 x 32
// tokens (where Python's per-op cost dominates) and 8 x 128 (where the kernels do). Prints per
// size the steps/s and tokens/s of each column and libkd's speed-up over each, the median of
// paired ratios.
//
// Like for like on all three columns:
// - the same tiny Llama pair, random init: teacher 4 layers x hidden 256 (intermediate 688,
//   4 heads), student 2 x 128 (344, 4 heads), vocabulary 4096. The peer makes them with
//   transformers (LlamaConfig + from_config, seeded) and save_pretrained's them; libkd's
//   "hf_causal_lm" loads the same folders. Float32, transformers' default attention (sdpa).
// - the same batches: random ids (seeded) written here as a flat uint16 token file, read by
//   libkd's "token_file" and by the peer from the bytes, windows in order, never shuffled;
//   labels = input_ids.
// - the same loss: silverspoon-kd's alpha 0.5 with "kl_div" at temperature 2, i.e. 0.5 soft +
//   0.5 the student's own next-token loss (libkd: terms "kl_div" and "CausalLMLoss", each
//   weighted 0.5; box_lm_kd_test holds them equal). Before timing, the first 3 steps' losses
//   of fresh models on every side are printed and must agree (relative 1e-4).
// - the same optimizer: AdamW lr 1e-3, betas (0.9, 0.999), eps 1e-8, no weight decay, the
//   per-parameter implementation on every side (the peer's Trainer with optim "adamw_torch");
//   constant learning rate; no gradient clipping (the peer's max_grad_norm 0, libkd's unset).
// - one intra-op thread each (--threads), tcmalloc each (libkd's binaries link it; the peer
//   LD_PRELOADs it).
// - libkd's teacher cache and overlap off (silverspoon-kd has neither on the CPU);
//   --teacher_extras=overlap puts the teacher a batch ahead on the idle core (a second core the
//   peer does not use), =auto leaves cache and overlap at their defaults: advantages the peer
//   lacks.
//
// A round is an epoch of --steps batches on each side, the three alternating (the paired rounds
// of distill/boxes/testing/peer_rounds.h, shared with feature_kd_benchmark): libkd's box
// Run()s one epoch per round (after a warm-up epoch, and before a last one left untimed, whose
// end is the run's), and its on_epoch callback asks the peer for a round of silverspoon-kd's
// and one of the plain loop (their order alternating), so all three see the same machine
// state. libkd's round is timed from the end of one callback to the start of the next (its
// epoch, loading the batches and the epoch's own work included); silverspoon-kd's from each
// step's on_step_begin to its on_step_end in the distiller's own Trainer loop
// (distiller.train(): silverspoon-kd's training_step, the grad norm the Trainer logs, the
// optimizer step, zero_grad; not fetching the batch); the plain loop's per step.
//
//   bazel run -c opt //distill/boxes:lm_kd_benchmark -- --pairs=5
//   (the peers: tools/install_deps.sh --peers)
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
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
#include "distill/boxes/box_options.h"
#include "distill/boxes/testing/peer_rounds.h"
#include "google/protobuf/text_format.h"
#include "testing/peer_process.h"
#include "testing/ratio_reporter.h"

ABSL_FLAG(int, pairs, 5, "timed rounds of each side per size, alternating (after a warm-up)");
ABSL_FLAG(int, steps, 20, "training steps a round (an epoch of its token file), each side");
ABSL_FLAG(int, threads, 1, "intra-op threads, each side");
ABSL_FLAG(std::string, teacher_extras, "off",
          "libkd's teacher cache and overlap: off (like for like, the default); overlap (the "
          "teacher's forward a batch ahead on the idle core, the cache off: a second core the "
          "peer does not use); auto (both at their defaults: with repeated windows the cache "
          "serves the teacher from the second epoch)");
ABSL_FLAG(std::string, work_dir, "/tmp/libkd_lm_kd_benchmark",
          "where the models, token files, run folders and the peer's log go (replaced)");

namespace kd {
namespace {

namespace fs = std::filesystem;
using test::Rounds;
using Size = test::BatchSize;

constexpr int64_t kVocab = 4096;
// The first steps whose losses must agree before timing, and how closely (relative).
constexpr int kLossSteps = 3;
constexpr double kLossTolerance = 1e-4;

struct SizeResult {
  Size size;
  Rounds libkd, silverspoon, plain;
  // libkd's teacher cache and overlap in the last timed epoch.
  std::optional<TeacherCacheReport> teacher_cache;
};

// The box: silverspoon-kd's ResponseBasedDistiller(alpha=0.5, soft_loss_fn="kl_div",
// soft_loss_fn_kwargs={"temperature": 2.0}) as a criterion, the peer's AdamW, `epochs` epochs
// of the token file's windows in order.
absl::StatusOr<DistillConfig> Config(const std::string& models, const std::string& tokens,
                                     const Size& size, int epochs, const std::string& extras) {
  const std::string text = absl::StrFormat(
      R"pb(
        run { name: "lm_kd" seed: 1 log_every_n_steps: 1000000 }
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
          name: "kd"
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
          }
          criterion {
            terms {
              name: "soft"
              key: "kl_div"
              kwargs { name: "temperature" number: 2 }
              weight: 0.5
              inputs { arg: "student" source: STUDENT }
              inputs { arg: "teacher" source: TEACHER }
            }
            terms {
              name: "hard"
              key: "CausalLMLoss"
              weight: 0.5
              inputs { arg: "input" source: STUDENT }
              inputs { arg: "labels" source: TARGETS }
            }
          } %s
        }
        checkpoint { save_last: false save_best: false }
      )pb",
      tokens, size.block, kVocab, models, models, epochs, size.batch,
      extras == "auto"      ? ""
      : extras == "overlap" ? "teacher_cache { mode: OFF } overlap_teacher: ON"
                            : "teacher_cache { mode: OFF } overlap_teacher: OFF");
  DistillConfig config;
  if (!google::protobuf::TextFormat::ParseFromString(text, &config)) {
    return absl::InternalError("the benchmark's own config does not parse");
  }
  return config;
}

// The answer's numbers, exactly `count` of them.
absl::StatusOr<std::vector<double>> Ask(test::PeerProcess& peer, const std::string& request,
                                        size_t count) {
  return test::AskPeer(peer, request, count, absl::GetFlag(FLAGS_work_dir) + "/peer.log");
}

// Fresh models on every side, the same first batches: the losses of the first steps must agree
// (the weights, batches, loss and optimizer are the same), or the timing compares other work.
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
      Ask(peer, absl::StrCat("losses ", tokens, " ", size.batch, " ", size.block, " ", kLossSteps),
          2 * kLossSteps));
  const std::vector<double> silverspoon(theirs.begin(), theirs.begin() + kLossSteps);
  const std::vector<double> plain(theirs.begin() + kLossSteps, theirs.end());
  const double ss = test::MaxRelativeDifference(ours, silverspoon);
  const double pt = test::MaxRelativeDifference(ours, plain);
  std::printf(
      "%-8s first %d steps' losses: libkd %s, silverspoon-kd %s, PyTorch %s; max relative "
      "difference %.1e (silverspoon-kd), %.1e (PyTorch)\n",
      size.name().c_str(), kLossSteps, test::FormatLosses(ours).c_str(),
      test::FormatLosses(silverspoon).c_str(), test::FormatLosses(plain).c_str(), ss, pt);
  std::fflush(stdout);
  if (!(ss <= kLossTolerance && pt <= kLossTolerance)) {
    return absl::InternalError(absl::StrFormat(
        "the losses differ by more than %.0e: the sides do not compute the same thing",
        kLossTolerance));
  }
  return absl::OkStatus();
}

// The timed rounds at one size: libkd's Run() epochs, the peer's rounds between them.
absl::StatusOr<SizeResult> TimeSize(test::PeerProcess& peer, const std::string& models,
                                    const Size& size, const std::vector<double>& peer_params) {
  const int steps = absl::GetFlag(FLAGS_steps), pairs = absl::GetFlag(FLAGS_pairs);
  const std::string extras = absl::GetFlag(FLAGS_teacher_extras);
  const std::string dir = absl::GetFlag(FLAGS_work_dir);
  const std::string tokens = absl::StrCat(dir, "/tokens_", size.file(), ".bin");
  KD_RETURN_IF_ERROR(test::WriteTokens(tokens, steps * size.batch * size.block, kVocab,
                                       static_cast<uint32_t>(1000 * size.batch + size.block)));
  KD_ASSIGN_OR_RETURN(DistillConfig config, Config(models, tokens, size, 2 + pairs, extras));
  KD_RETURN_IF_ERROR(CheckLosses(peer, config, tokens, size, peer_params));

  SizeResult result{.size = size};
  const std::string args = absl::StrCat(tokens, " ", size.batch, " ", size.block, " ", steps);
  auto peer_rounds = [&](int64_t epoch, bool warmup) -> absl::Status {
    for (int i = 0; i < 2; ++i) {  // silverspoon-kd first in odd epochs, PyTorch in even ones
      const bool silverspoon = (i == 0) == (epoch % 2 == 1);
      KD_ASSIGN_OR_RETURN(
          std::vector<double> t,
          Ask(peer, absl::StrCat(silverspoon ? "silverspoon " : "plain ", args), 2));
      if (warmup) continue;
      Rounds& rounds = silverspoon ? result.silverspoon : result.plain;
      rounds.wall.push_back(t[0]);
      rounds.cpu.push_back(t[1]);
    }
    return absl::OkStatus();
  };
  KD_ASSIGN_OR_RETURN(result.libkd,
                      test::RunPairedRounds(config, absl::StrCat(dir, "/run_", size.file()), pairs,
                                            peer_rounds, [&](const EpochReport& report) {
                                              result.teacher_cache = report.teacher_cache;
                                            }));
  return result;
}

void PrintTable(const std::vector<SizeResult>& results) {
  const int steps = absl::GetFlag(FLAGS_steps);
  std::printf(
      "\nlibkd (%s) against silverspoon-kd's ResponseBasedDistiller and a plain PyTorch loop "
      "(tcmalloc by LD_PRELOAD); %d intra-op thread(s) each; libkd's teacher cache and overlap: "
      "%s; %d steps a round, medians of %zu rounds; speed-ups: medians of paired ratios of "
      "wall time (CPU time in brackets)\n",
      test::MallocName(), absl::GetFlag(FLAGS_threads),
      absl::GetFlag(FLAGS_teacher_extras) == "auto"      ? "at their defaults (AUTO)"
      : absl::GetFlag(FLAGS_teacher_extras) == "overlap" ? "overlap on, cache off"
                                                         : "off",
      steps, results.empty() ? size_t{0} : results[0].libkd.wall.size());
  std::printf("%-8s | %-33s | %-33s | %-31s\n", "", "steps/s", "tokens/s", "libkd's speed-up");
  std::printf("%-8s | %9s %13s %9s | %9s %13s %9s | %15s %15s\n", "size", "libkd", "silverspoon",
              "PyTorch", "libkd", "silverspoon", "PyTorch", "vs silverspoon", "vs PyTorch");
  for (const SizeResult& r : results) {
    const double tokens = static_cast<double>(r.size.batch * r.size.block);
    const double libkd = steps / test::Median(r.libkd.wall);
    const double silverspoon = steps / test::Median(r.silverspoon.wall);
    const double plain = steps / test::Median(r.plain.wall);
    const std::string vs_ss =
        absl::StrFormat("%.2fx (%.2fx)", test::SpeedUp(r.libkd.wall, r.silverspoon.wall),
                        test::SpeedUp(r.libkd.cpu, r.silverspoon.cpu));
    const std::string vs_pt =
        absl::StrFormat("%.2fx (%.2fx)", test::SpeedUp(r.libkd.wall, r.plain.wall),
                        test::SpeedUp(r.libkd.cpu, r.plain.cpu));
    std::printf("%-8s | %9.1f %13.1f %9.1f | %9.0f %13.0f %9.0f | %15s %15s\n",
                r.size.name().c_str(), libkd, silverspoon, plain, libkd * tokens,
                silverspoon * tokens, plain * tokens, vs_ss.c_str(), vs_pt.c_str());
  }
  // What libkd skipped (with --teacher_extras): the teacher's rows served from its cache, and
  // whether it ran a batch ahead on a thread of its own.
  for (const SizeResult& r : results) {
    if (!r.teacher_cache.has_value()) continue;
    const TeacherCacheReport& c = *r.teacher_cache;
    const std::string cache =
        c.on ? absl::StrFormat("on, %d of %d rows served from it", c.hits, c.hits + c.misses)
             : absl::StrCat("off (", c.off_reason, ")");
    const std::string overlap =
        c.overlapped ? "on" : absl::StrCat("off (", c.overlap_off_reason, ")");
    std::printf("%-8s libkd's last timed epoch: teacher cache %s; overlap %s\n",
                r.size.name().c_str(), cache.c_str(), overlap.c_str());
  }
}

absl::Status Main() {
  const int threads = absl::GetFlag(FLAGS_threads);
  if (absl::GetFlag(FLAGS_pairs) < 1 || absl::GetFlag(FLAGS_steps) < kLossSteps || threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("need --pairs >= 1, --steps >= ", kLossSteps, " and --threads >= 1"));
  }
  at::set_num_threads(threads);
  const std::string dir = absl::GetFlag(FLAGS_work_dir);
  std::error_code error;
  fs::remove_all(dir, error);
  fs::create_directories(dir + "/models", error);
  if (error) return absl::InternalError(absl::StrCat("cannot make ", dir, ": ", error.message()));

  test::PeerProcess peer;
  KD_RETURN_IF_ERROR(
      test::StartPeer(peer, "distill/boxes/peer_lm_kd_timing.py", threads, dir + "/peer.log"));
  // The peer makes the models once; libkd reads the same folders.
  const std::string models = dir + "/models";
  KD_ASSIGN_OR_RETURN(std::vector<double> params, Ask(peer, "models " + models, 2));
  std::printf(
      "models: teacher %.0f parameters, student %.0f (Llama, vocabulary %ld, random "
      "init, transformers' save_pretrained; both sides load the same files)\n",
      params[0], params[1], static_cast<long>(kVocab));
  std::vector<SizeResult> results;
  for (const Size& size : {Size{2, 32}, Size{8, 128}}) {
    KD_ASSIGN_OR_RETURN(SizeResult r, TimeSize(peer, models, size, params));
    results.push_back(std::move(r));
  }
  PrintTable(results);
  return absl::OkStatus();
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (const std::string extras = absl::GetFlag(FLAGS_teacher_extras);
      extras != "off" && extras != "overlap" && extras != "auto") {
    std::fprintf(stderr, "lm_kd_benchmark: --teacher_extras must be off, overlap or auto, got %s\n",
                 extras.c_str());
    return 2;
  }
  const absl::Status status = kd::Main();
  if (!status.ok()) {
    std::fprintf(stderr, "lm_kd_benchmark: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
