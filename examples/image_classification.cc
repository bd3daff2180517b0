// torchdistill's image-classification script (examples/torchvision/image_classification.py)
// ported to C++, flag for flag: the config (torchdistill's YAML, imported, or a libkd config)
// gives datasets, models and stages; the box is driven from the script's own loop (pre-epoch,
// forward and post-forward per batch with a log every --log_freq steps, validation top-1 and
// top-5, post-epoch, which writes the best checkpoint); then the best student, and the teacher
// unless --student_only, are tested on the config's test loader.
//
//   bazel run -c opt //examples:image_classification -- --run_dir=/tmp/cifar_kd
//       --config=$PWD/distill/torchdistill/testdata/cifar10_kd.yaml   (one line)
//
// Flags as the script's: --config, --device, --run_log, --start_epoch (a run folder stopped
// after epoch N resumes at N: its optimizer, scheduler, RNG and best accuracy), --seed,
// --test_only, --student_only, --log_config, --world_size (torchrun's processes: the box joins
// their group; each rank tests on the whole test set, rank 0 prints), --adjust_lr; and libkd's
// --run_dir (the run folder: checkpoints, the script's dst_ckpt).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/optim/optimizer.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "distill/boxes/box.h"
#include "distill/boxes/checkpoint.h"
#include "distill/config/config_loader.h"
#include "distill/config/config_validator.h"
#include "distill/torchdistill/importer.h"
#include "distill/data/data_loader.h"

ABSL_FLAG(std::string, config, "", "the config: torchdistill's YAML (.yaml, .yml) or libkd's");
ABSL_FLAG(std::string, device, "", "the device (default: the config's run.device)");
ABSL_FLAG(std::string, run_log, "", "a log file the script's lines are appended to");
ABSL_FLAG(int64_t, start_epoch, 0,
          "the epoch to start at: > 0 resumes the run folder's last checkpoint, which must end "
          "there");
ABSL_FLAG(int64_t, seed, -1, "the seed (default: the config's run.seed)");
ABSL_FLAG(bool, test_only, false, "only test the models");
ABSL_FLAG(bool, student_only, false, "test the student model only");
ABSL_FLAG(bool, log_config, false, "log the config");
ABSL_FLAG(int, world_size, 1, "number of distributed processes (torchrun's WORLD_SIZE)");
ABSL_FLAG(bool, adjust_lr, false,
          "multiply the learning rates by the number of processes (world_size)");
ABSL_FLAG(std::string, run_dir, "", "the run folder (default: runs/<run.name>)");
ABSL_FLAG(int64_t, log_freq, 0, "log every N steps (default: the config's log_every_n_steps)");

namespace {

// The script's logger: stdout (rank 0) and --run_log.
class Log {
 public:
  absl::Status Open(const std::string& path, bool main_process) {
    main_process_ = main_process;
    if (path.empty() || !main_process) return absl::OkStatus();
    file_.open(path, std::ios::app);
    if (!file_) return absl::InvalidArgumentError(absl::StrCat("--run_log: cannot open ", path));
    return absl::OkStatus();
  }
  void operator()(const std::string& line) {
    if (!main_process_) return;
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    if (file_.is_open()) file_ << line << "\n" << std::flush;
  }

 private:
  bool main_process_ = true;
  std::ofstream file_;
};

// The config at --config: torchdistill's YAML through libkd's importer (what it cannot translate
// listed, exit 1), or libkd's text format, validated.
absl::StatusOr<kd::DistillConfig> LoadConfig(const std::string& path, int64_t seed, Log& log) {
  if (absl::EndsWith(path, ".yaml") || absl::EndsWith(path, ".yml")) {
    KD_ASSIGN_OR_RETURN(kd::torchdistill::Import imported,
                        kd::torchdistill::ImportFile(path, {.seed = std::max<int64_t>(seed, 0)}));
    for (const std::string& note : imported.notes) log("note: " + note);
    if (!imported.unsupported.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the YAML has what libkd does not translate:\n  ",
          absl::StrJoin(imported.unsupported, "\n  ")));
    }
    return imported.config;
  }
  KD_ASSIGN_OR_RETURN(kd::LoadedConfig loaded, kd::LoadConfig(path));
  std::vector<std::string> errors;
  for (const kd::ConfigProblem& problem : kd::ValidateConfig(loaded)) {
    if (problem.is_error()) errors.push_back(problem.ToString());
  }
  if (!errors.empty()) return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  return loaded.config;
}

// The script's compute_accuracy + evaluate: top-1 and top-5 accuracy (in %) of `model` over
// `loader`, in eval mode without gradients.
std::pair<double, double> Evaluate(kd::Model& model, kd::DataLoader& loader) {
  const bool was_training = model.is_training();
  model.SetTraining(false);
  at::NoGradGuard no_grad;
  double top1 = 0, top5 = 0;
  int64_t n = 0;
  for (kd::BatchStream batches(loader); !batches.done();) {
    kd::Batch batch = batches.Next();
    const at::Tensor samples = batch.samples.toTensor();
    const at::Tensor targets = batch.targets.toTensor();
    const at::Tensor outputs = model.Forward({samples}).toTensor();
    const int64_t k = std::min<int64_t>(5, outputs.size(1));
    const at::Tensor preds = std::get<1>(outputs.topk(k, 1, true, true)).t();
    const at::Tensor corrects = preds.eq(targets.unsqueeze(0));
    top1 += corrects.slice(0, 0, 1).sum().item<double>();
    top5 += corrects.sum().item<double>();
    n += targets.size(0);
  }
  model.SetTraining(was_training);
  if (n == 0) return {0, 0};
  return {100.0 * top1 / n, 100.0 * top5 / n};
}

// The script's train(): its loop over the run's epochs from --start_epoch.
absl::Status Train(kd::Box& box, int64_t log_freq, Log& log) {
  log("Start training");
  const auto start = std::chrono::steady_clock::now();
  for (int64_t epoch = box.start_epoch(); epoch < box.num_epochs(); ++epoch) {
    KD_RETURN_IF_ERROR(box.PreEpoch(epoch));
    KD_ASSIGN_OR_RETURN(kd::DataLoader * loader, box.TrainLoader());
    KD_ASSIGN_OR_RETURN(torch::optim::Optimizer * optimizer, box.Optimizer());
    const int64_t steps = loader->num_batches();
    int64_t step = 0;
    for (kd::BatchStream batches(*loader); !batches.done(); ++step) {
      const auto batch_start = std::chrono::steady_clock::now();
      kd::Batch batch = batches.Next();
      KD_RETURN_IF_ERROR(box.PreForward(batch));
      KD_ASSIGN_OR_RETURN(at::Tensor loss, box.Forward(batch));
      KD_RETURN_IF_ERROR(box.PostForward(loss));
      if (log_freq > 0 && (step % log_freq == 0 || step + 1 == steps)) {
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - batch_start).count();
        log(absl::StrFormat("Epoch: [%d]  [%d/%d]  lr: %g  img/s: %.1f  loss: %.4f", epoch, step,
                            steps, optimizer->param_groups()[0].options().get_lr(),
                            static_cast<double>(batch.samples.toTensor().size(0)) / seconds,
                            loss.item<double>()));
      }
    }
    // Validation: the config's metrics (top-1, top-5 for an imported config) on its loader;
    // PostEpoch writes last.pt, and best.pt on a better primary metric (the script's save_ckpt).
    KD_ASSIGN_OR_RETURN(auto metrics, box.Evaluate());
    std::vector<std::string> shown;
    for (const auto& [name, value] : metrics) shown.push_back(absl::StrFormat("%s %.4f", name, value));
    log(absl::StrCat("Validation: epoch ", epoch, ": ", absl::StrJoin(shown, ", ")));
    KD_RETURN_IF_ERROR(box.PostEpoch(metrics));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log(absl::StrFormat("Training time %.1f s", seconds));
  return box.CleanModules();
}

absl::Status Main() {
  const std::string config_path = absl::GetFlag(FLAGS_config);
  if (config_path.empty()) return absl::InvalidArgumentError("--config is required");
  // torchrun's environment: a rank other than 0 logs nothing.
  int world = 1, rank = 0;
  if (const char* w = std::getenv("WORLD_SIZE"); w != nullptr && !absl::SimpleAtoi(w, &world)) {
    return absl::InvalidArgumentError(absl::StrCat("WORLD_SIZE is not a number: ", w));
  }
  if (const char* r = std::getenv("RANK"); r != nullptr) (void)absl::SimpleAtoi(r, &rank);
  if (absl::GetFlag(FLAGS_world_size) != world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--world_size=", absl::GetFlag(FLAGS_world_size), " but ", world,
        " process(es) run (WORLD_SIZE): start one process per rank with torchrun "
        "--nproc_per_node=N, which sets it"));
  }
  Log log;
  KD_RETURN_IF_ERROR(log.Open(absl::GetFlag(FLAGS_run_log), rank == 0));
  const int64_t seed = absl::GetFlag(FLAGS_seed);
  KD_ASSIGN_OR_RETURN(kd::DistillConfig config, LoadConfig(config_path, seed, log));
  if (absl::GetFlag(FLAGS_log_config)) log(config.DebugString());

  const int64_t start_epoch = absl::GetFlag(FLAGS_start_epoch);
  const bool test_only = absl::GetFlag(FLAGS_test_only);
  const std::string run_dir = absl::GetFlag(FLAGS_run_dir);
  // --test_only reads a run folder's checkpoints (when it has them) and trains nothing.
  const bool has_run = !run_dir.empty() && std::filesystem::exists(
                                               std::filesystem::path(run_dir) / "ckpt" / "last.pt");
  kd::BoxOptions options{.run_dir = run_dir,
                         .resume = start_epoch > 0 || (test_only && has_run),
                         .overwrite = start_epoch == 0 && !test_only,
                         .lr_factor = absl::GetFlag(FLAGS_adjust_lr) ? world : 1.0};
  if (seed >= 0) options.seed = seed;
  if (!absl::GetFlag(FLAGS_device).empty()) options.device = absl::GetFlag(FLAGS_device);
  KD_ASSIGN_OR_RETURN(std::unique_ptr<kd::Box> box, kd::MakeBox(config, options));
  log(absl::StrCat(box->kind(), ": ", box->num_epochs(), " epochs, ", box->num_stages(),
                   box->num_stages() == 1 ? " stage" : " stages"));
  if (!test_only) {
    if (start_epoch != box->start_epoch()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--start_epoch=", start_epoch, " but the run folder's checkpoint ends after epoch ",
          box->start_epoch(), ": give --start_epoch=", box->start_epoch()));
    }
    const int64_t log_freq = absl::GetFlag(FLAGS_log_freq) > 0
                                 ? absl::GetFlag(FLAGS_log_freq)
                                 : std::max(1, config.run().log_every_n_steps());
    KD_RETURN_IF_ERROR(Train(*box, log_freq, log));
  }

  // The best student by validation (the script's dst_ckpt), then the test.
  const std::string best = (std::filesystem::path(box->checkpoint_dir()) / "best.pt").string();
  if (std::filesystem::exists(best)) {
    KD_ASSIGN_OR_RETURN(c10::impl::GenericDict saved, kd::ReadCheckpoint(best));
    KD_RETURN_IF_ERROR(kd::LoadStateDict(box->student(), saved.at("student"), best));
    log(absl::StrCat("the student of ", best, " (best validation)"));
  }
  if (!config.has_test_data_loader()) {
    log("no test_data_loader in the config: nothing to test");
    return absl::OkStatus();
  }
  const kd::LoaderConfig& test = config.test_data_loader();
  std::shared_ptr<kd::Dataset> dataset = box->dataset(test.dataset_id());
  if (dataset == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("test_data_loader: no dataset \"",
                                                   test.dataset_id(), "\""));
  }
  KD_ASSIGN_OR_RETURN(kd::DataLoader loader,
                      kd::DataLoader::Create(dataset, {.batch_size = test.batch_size()}));
  std::vector<std::pair<std::string, kd::Model*>> tested;
  if (!absl::GetFlag(FLAGS_student_only) && box->teacher() != nullptr) {
    tested.emplace_back("Teacher", box->teacher());
  }
  tested.emplace_back("Student", &box->student());
  for (const auto& [who, model] : tested) {
    const auto [top1, top5] = Evaluate(*model, loader);
    log(absl::StrFormat("[%s] Test: Acc@1 %.4f  Acc@5 %.4f", who, top1, top5));
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = Main();
  if (!status.ok()) {
    std::fprintf(stderr, "image_classification: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
