#include "tools/distill_main.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "base/device.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "distill/boxes/box.h"
#include "distill/boxes/distributed/ddp.h"
#include "distill/config/config_loader.h"
#include "distill/config/config_validator.h"
#include "google/protobuf/text_format.h"
#include "tools/lm_job.h"
#include "tools/run_job.h"
#include "tools/run_log.pb.h"
#include "tools/run_report.h"
#include "tools/teacher_package.h"
#include "tools/tool_util.h"

ABSL_FLAG(std::string, config, "",
          "A kd.DistillConfig in protobuf text format (tools/configs/). "
          "Default: the Fashion-MNIST "
          "job: teacher, student alone, student distilled.");
ABSL_FLAG(std::string, run_dir, "",
          "Folder for checkpoints, metrics.jsonl and summary.json. Default: the "
          "config's "
          "run.run_dir, else runs/<run.name> (the default job: runs/default/<job>).");
ABSL_FLAG(bool, resume, false,
          "Continue the run in the run folder from its last checkpoint (an error when it has "
          "none).");
ABSL_FLAG(bool, overwrite, false,
          "Replace the run the run folder holds (its metrics.jsonl, summary.json and "
          "checkpoints). Without --resume or --overwrite a folder that holds a run is refused.");
ABSL_FLAG(int, nproc_per_node, 0,
          "Start this many processes on this machine as the ranks of one run (torchrun's "
          "environment: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, "
          "MASTER_PORT), each on its shard of the training data; a student with wrapper "
          "DISTRIBUTED_DATA_PARALLEL averages gradients across them; rank 0 logs and writes. "
          "0: one process (or the ranks torchrun started).");
ABSL_FLAG(int, master_port, 0,
          "With --nproc_per_node: the rendezvous port, 1-65535 (0: a free one).");
ABSL_FLAG(std::string, profile_dir, "",
          "Profile the training steps with libtorch's Kineto profiler: Chrome traces "
          "(trace_step_<N>.json, one per active window) go to DIR/<job>/. The schedule is the "
          "config's `profiler`, else silverspoon-kd's defaults (wait 20, warmup 3, active 3, "
          "repeat 1). Default: only a config's `profiler` profiles.");
ABSL_FLAG(std::optional<int64_t>, seed, std::nullopt, "Overrides run.seed.");
ABSL_FLAG(std::string, device, "", "Overrides run.device: cpu, cuda or cuda:N.");
ABSL_FLAG(std::string, teacher_format, "native",
          "The default job's teacher in part 3: native (part 1's checkpoint) or aoti (part 1's "
          "teacher exported as an AOTInductor package by tools/export_teacher.py through "
          "--python, then distilled from; the export takes a minute or two). Only without "
          "--config: a config names its teacher (teacher { aoti_package: ... }).");
ABSL_FLAG(std::string, job, "image",
          "Without --config, the default job to run: image (Fashion-MNIST: a teacher CNN, the "
          "student alone, the student distilled) or lm (the fortunes corpus: a SentencePiece "
          "tokenizer, a Llama teacher, a small Llama alone, distilled with forward KL and with "
          "on-policy GKD; runs/lm).");
ABSL_FLAG(std::string, corpus, "/usr/share/games/fortunes",
          "The LM job's corpus: fortune-mod files (Debian's fortunes package installs them) or "
          "one text file of documents separated by lines of %.");
ABSL_FLAG(std::string, job_configs, "",
          "The default job's configs from this folder: the image job's fashion_mnist_teacher, "
          "_student and _student_kd.pbtxt, the LM job's fortunes_teacher, _student, _student_kd, "
          "_student_gkd, _student_hkd and _student_bkd.pbtxt. Default: tools/configs. Only without "
          "--config.");
ABSL_FLAG(std::string, python, "",
          "The Python (with torch) that exports the package teacher of --teacher_format=aoti. "
          "Default: $LIBKD_VENV/bin/python, else ~/.cache/libkd/venv/bin/python (the "
          "installer's).");
ABSL_FLAG(bool, tensorboard, true,
          "Write TensorBoard event files to <run_dir>/tb/: the config, every logged step's and "
          "every epoch's values (those of metrics.jsonl) as scalars. --tensorboard=false: none.");
ABSL_FLAG(int, tensorboard_histograms_every, 0,
          "With --tensorboard: histograms of the student's parameters and gradients every N "
          "epochs, 0-1000 (0: none).");
ABSL_FLAG(int, threads, 0,
          "libtorch's intra-op CPU threads, at most 4 per core; 0: libtorch's default (one per "
          "core). On a busy machine 1 is often faster: OpenMP threads wait on each other.");

namespace kd {
namespace {

constexpr char kTool[] = "distill";

int Fail(absl::string_view message, int code = 2) {
  ::kd::Fail(kTool, message);  // tool_util's: one line, control bytes escaped
  return code;
}

// What the flags say about running one config (the run folder: `run_dir`).
JobOptions JobOptionsOf(std::string run_dir) {
  return {.run_dir = std::move(run_dir),
          .resume = absl::GetFlag(FLAGS_resume),
          .overwrite = absl::GetFlag(FLAGS_overwrite),
          .seed = absl::GetFlag(FLAGS_seed),
          .device = absl::GetFlag(FLAGS_device),
          .profile_dir = absl::GetFlag(FLAGS_profile_dir).empty()
                             ? ""
                             : ResolveUserPath(absl::GetFlag(FLAGS_profile_dir)),
          .tensorboard = absl::GetFlag(FLAGS_tensorboard),
          .tensorboard_histograms_every = absl::GetFlag(FLAGS_tensorboard_histograms_every)};
}

// The config at `path`, validated. Errors: a file that cannot be read (FailedPrecondition, one
// line); problems of the text, one per line as file:line:column: message.
absl::StatusOr<DistillConfig> Load(const std::string& path, std::string* text) {
  absl::StatusOr<std::string> bytes = ReadFile(path, kMaxTextBytes);
  if (!bytes.ok()) return absl::FailedPreconditionError(bytes.status().message());
  KD_ASSIGN_OR_RETURN(LoadedConfig loaded, ParseConfig(*bytes, path));
  const std::vector<ConfigProblem> problems = ValidateConfig(loaded, {});
  std::vector<std::string> errors;
  for (const ConfigProblem& problem : problems) errors.push_back(problem.ToString());
  if (HasErrors(problems)) return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  google::protobuf::TextFormat::PrintToString(loaded.config, text);
  return loaded.config;
}

// The configs of the default job, next to the program in its runfiles, or in
// the source tree.
std::string DefaultConfig(const std::string& name) {
  if (const std::string dir = absl::GetFlag(FLAGS_job_configs); !dir.empty()) {
    return (std::filesystem::path(ResolveUserPath(dir)) / name).string();
  }
  for (const std::string& dir : {std::string("tools/configs"), ResolveUserPath("tools/configs")}) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    if (std::filesystem::exists(path)) return path;
  }
  return (std::filesystem::path("tools/configs") / name).string();
}

// Every part's config read and checked (appended to `configs`, its text to `texts`) before
// anything trains.
absl::Status LoadJobConfigs(absl::Span<const JobPart> parts, std::vector<DistillConfig>& configs,
                            std::vector<std::string>& texts) {
  for (const JobPart& part : parts) {
    std::string text;
    KD_ASSIGN_OR_RETURN(DistillConfig config, Load(DefaultConfig(part.config), &text));
    configs.push_back(std::move(config));
    texts.push_back(std::move(text));
  }
  return absl::OkStatus();
}

int DefaultJob() {
  const std::string root =
      absl::GetFlag(FLAGS_run_dir).empty() ? "runs/default" : absl::GetFlag(FLAGS_run_dir);
  const bool package_teacher = absl::GetFlag(FLAGS_teacher_format) == "aoti";
  const std::vector<JobPart> jobs = {
      {"teacher", "fashion_mnist_teacher.pbtxt"},
      {"student", "fashion_mnist_student.pbtxt"},
      {package_teacher ? "student_kd_aoti" : "student_kd", "fashion_mnist_student_kd.pbtxt"}};
  // Every config is read and checked, and the exporter found, before anything trains.
  std::vector<DistillConfig> configs;
  std::vector<std::string> texts;
  if (absl::Status loaded = LoadJobConfigs(jobs, configs, texts); !loaded.ok()) {
    return Fail(loaded.message());
  }
  std::optional<PackageExporter> exporter;
  if (package_teacher) {
    absl::StatusOr<PackageExporter> found = FindPackageExporter(absl::GetFlag(FLAGS_python));
    if (!found.ok()) return Fail(found.status().message());
    exporter = *std::move(found);
  }
  const std::string teacher_ckpt =
      ResolveUserPath((std::filesystem::path(root) / "teacher" / "model.pt").string());
  const std::string package =
      ResolveUserPath((std::filesystem::path(root) / "teacher.pt2").string());
  std::vector<RunSummary> summaries;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const JobPart& job = jobs[i];
    DistillConfig* config = &configs[i];
    std::string& text = texts[i];
    const std::string dir = (std::filesystem::path(root) / job.name).string();
    config->mutable_student()->set_dst_ckpt(ResolveUserPath(dir + "/model.pt"));
    if (config->has_teacher() && package_teacher) {
      std::cerr << "distill: exporting the teacher as an AOTInductor package: " << package
                << std::endl;
      const std::string log =
          ResolveUserPath((std::filesystem::path(root) / "export.log").string());
      if (absl::Status done =
              ExportTeacherPackage(*exporter, configs[0], *config, teacher_ckpt, package, log);
          !done.ok()) {
        return Fail(done.message(), ExitCodeOf(done));
      }
      config->mutable_teacher()->Clear();
      config->mutable_teacher()->set_aoti_package(package);
      google::protobuf::TextFormat::PrintToString(*config, &text);
    } else if (config->has_teacher()) {
      config->mutable_teacher()->set_src_ckpt(teacher_ckpt);
    }
    absl::StatusOr<RunSummary> summary = RunJob(*config, job.name, text, JobOptionsOf(dir));
    if (!summary.ok()) {
      return Fail(absl::StrCat(job.name, ": ", summary.status().message()),
                  ExitCodeOf(summary.status()));
    }
    summaries.push_back(*summary);
  }
  std::cout << absl::StrFormat("\n%-16s %-16s %10s %10s %9s\n", "model", "box", "test top-1",
                               "test top-5", "time");
  for (const RunSummary& s : summaries) {
    // The test set's metrics (the default configs have one: validation is a split of the
    // training images), else the last validation's.
    const auto& metrics = s.test_metrics().empty() ? s.final_metrics() : s.test_metrics();
    std::cout << absl::StrFormat("%-16s %-16s %9.2f%% %9.2f%% %9s\n", s.name(), s.box(),
                                 100 * MetricOrNan(metrics, "accuracy"),
                                 100 * MetricOrNan(metrics, "top5"), Clock(s.seconds()));
  }
  if (absl::GetFlag(FLAGS_tensorboard)) {
    // The three runs side by side: TensorBoard takes each folder with event files as a run.
    const std::string installed = InstallerVenv() + "/bin/tensorboard";
    std::cout << "\nCurves of the three runs: "
              << (std::filesystem::exists(installed) ? installed : "tensorboard") << " --logdir "
              << ResolveUserPath(root) << "\n";
  }
  return 0;
}

// The LM job (tools/lm_job.h) with this program's flags.
int LmJob() {
  std::vector<DistillConfig> configs;
  std::vector<std::string> texts;  // the job prints each config again once it has its paths
  if (absl::Status loaded = LoadJobConfigs(kLmJobParts, configs, texts); !loaded.ok()) {
    return Fail(loaded.message());
  }
  const absl::Status done = RunLmJob(
      std::move(configs),
      {.root = ResolveUserPath(absl::GetFlag(FLAGS_run_dir).empty() ? "runs/lm"
                                                                    : absl::GetFlag(FLAGS_run_dir)),
       .corpus = ResolveUserPath(absl::GetFlag(FLAGS_corpus)),
       .overwrite = absl::GetFlag(FLAGS_overwrite),
       .job_options = JobOptionsOf});
  return done.ok() ? 0 : Fail(done.message(), ExitCodeOf(done));
}

int Main() {
  const std::string path = absl::GetFlag(FLAGS_config);
  if (path.empty()) return absl::GetFlag(FLAGS_job) == "lm" ? LmJob() : DefaultJob();
  std::string text;
  absl::StatusOr<DistillConfig> config = Load(ResolveUserPath(path), &text);
  if (!config.ok()) {
    // An unreadable file is one line for Fail; the text's problems are printed as they are.
    if (config.status().code() == absl::StatusCode::kFailedPrecondition) {
      return Fail(config.status().message());
    }
    std::cerr << config.status().message() << std::endl;
    return 2;
  }
  const std::string name = config->run().name().empty() ? "run" : config->run().name();
  absl::StatusOr<RunSummary> summary =
      RunJob(*config, name, text, JobOptionsOf(absl::GetFlag(FLAGS_run_dir)));
  if (!summary.ok()) return Fail(summary.status().message(), ExitCodeOf(summary.status()));
  const char* rank = std::getenv("RANK");
  if (rank == nullptr || std::string(rank) == "0") std::cout << Json(*summary) << std::endl;
  return 0;
}

// --nproc_per_node=N: starts N copies of this program as ranks 0..N-1 of one run on this
// machine, as torchrun does, and waits for them; when one fails, the others are stopped.
int Launch(int nproc, char** argv) {
  const int port =
      absl::GetFlag(FLAGS_master_port) > 0 ? absl::GetFlag(FLAGS_master_port) : FreeLoopbackPort();
  absl::StatusOr<std::vector<int>> ranks = StartLocalRanks(nproc, port, argv);
  if (!ranks.ok()) return Fail(absl::StrCat("--nproc_per_node: ", ranks.status().message()), 1);
  if (absl::Status done = WaitForRanks(*ranks); !done.ok()) {
    return Fail(absl::StrCat("--nproc_per_node: ", done.message()), 1);
  }
  return 0;
}

// Every flag checked against its bounds before any work starts.
absl::Status CheckFlags() {
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int max_per_core = 4;
  auto bounded = [&](const char* name, int value, int most, const char* what) {
    if (value < 0 || value > most) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " must be 0-", most, " (", what, "), got ", value));
    }
    return absl::OkStatus();
  };
  const std::string cap =
      absl::StrCat("at most ", max_per_core, " per core, ", cores, " cores here");
  KD_RETURN_IF_ERROR(bounded("nproc_per_node", absl::GetFlag(FLAGS_nproc_per_node),
                             max_per_core * cores, cap.c_str()));
  KD_RETURN_IF_ERROR(
      bounded("threads", absl::GetFlag(FLAGS_threads), max_per_core * cores, cap.c_str()));
  KD_RETURN_IF_ERROR(
      bounded("master_port", absl::GetFlag(FLAGS_master_port), 65535, "0: a free port"));
  KD_RETURN_IF_ERROR(bounded("tensorboard_histograms_every",
                             absl::GetFlag(FLAGS_tensorboard_histograms_every), 1000,
                             "epochs between histograms; 0: none"));
  if (const std::string format = absl::GetFlag(FLAGS_teacher_format);
      format != "native" && format != "aoti") {
    return absl::InvalidArgumentError(
        absl::StrCat("--teacher_format must be native or aoti, got \"", format, "\""));
  }
  if (const std::string job = absl::GetFlag(FLAGS_job); job != "image" && job != "lm") {
    return absl::InvalidArgumentError(absl::StrCat("--job must be image or lm, got \"", job, "\""));
  }
  if (absl::GetFlag(FLAGS_job) == "lm" && absl::GetFlag(FLAGS_teacher_format) != "native") {
    return absl::InvalidArgumentError(
        "--teacher_format is the image job's; the LM job's teacher is a native Llama");
  }
  if (!absl::GetFlag(FLAGS_config).empty()) {
    if (absl::GetFlag(FLAGS_job) != "image") {
      return absl::InvalidArgumentError(
          "--job picks a default job; with --config the config is the job: drop one");
    }
    if (absl::GetFlag(FLAGS_teacher_format) != "native") {
      return absl::InvalidArgumentError(
          "--teacher_format is the default job's; with --config the config names its teacher "
          "(teacher { aoti_package: \"FILE.pt2\" })");
    }
    if (!absl::GetFlag(FLAGS_job_configs).empty()) {
      return absl::InvalidArgumentError(
          "--job_configs gives the default job's configs; drop it or --config");
    }
  }
  if (absl::GetFlag(FLAGS_resume) && absl::GetFlag(FLAGS_overwrite)) {
    return absl::InvalidArgumentError(
        "--resume continues the run folder's run and --overwrite replaces it: give one");
  }
  if (const std::string device = absl::GetFlag(FLAGS_device); !device.empty()) {
    absl::StatusOr<c10::Device> parsed = ParseDevice(device);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--device: ", parsed.status().message()));
    }
  }
  if (const std::string dir = absl::GetFlag(FLAGS_profile_dir); !dir.empty()) {
    std::error_code error;
    const std::string resolved = ResolveUserPath(dir);
    if (std::filesystem::exists(resolved, error) &&
        !std::filesystem::is_directory(resolved, error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--profile_dir ", resolved, ": is a file; give a folder for the traces"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int DistillMain(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Runs a libkd distillation config (or, without --config, the "
      "Fashion-MNIST job: a "
      "teacher, the student alone, the student distilled).\n"
      "Usage: bazel run //tools:distill -- [--config=FILE] [--run_dir=DIR] "
      "[--resume] "
      "[--seed=N] [--device=cpu|cuda:N]");
  ParseFlagsOrExit(argc, argv, kTool);
  if (absl::Status flags = CheckFlags(); !flags.ok()) return Fail(flags.message());
  if (absl::GetFlag(FLAGS_nproc_per_node) > 1 && std::getenv("LIBKD_LAUNCHED") == nullptr) {
    return Launch(absl::GetFlag(FLAGS_nproc_per_node), argv);
  }
  if (absl::GetFlag(FLAGS_threads) > 0) {
    at::set_num_threads(absl::GetFlag(FLAGS_threads));
  } else if (absl::GetFlag(FLAGS_config).empty() && absl::GetFlag(FLAGS_job) == "image") {
    // The image job's small CNNs gain little from a second OpenMP thread on a
    // 2-core machine and lose much when the machine is busy (measured: README,
    // "The main job"). The LM job's matrix products use every core (1.75x with two).
    at::set_num_threads(1);
  }
  return FinishOutput(kTool, Main());
}

}  // namespace kd
