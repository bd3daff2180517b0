// import_torchdistill: a torchdistill (1.x) YAML config as libkd's DistillConfig text
// (distill/torchdistill/importer.h), then validated as //tools:validate_config does.
//
//   bazel run //tools:import_torchdistill -- --yaml=configs/kd.yaml --out=kd.pbtxt [--seed=1]
//
// stdout (or --out, written atomically): the config. stderr: each key without a libkd
// translation as `file.yaml:LINE:COL: <what> is not supported: <why / what to do>`, notes on
// settings left out that change nothing in libkd, then the validation's problems of the result
// (a dataset or model key it names that libkd lacks: what must be supplied).
//
// Exit codes: 0 translated and valid; 1 written, but something is not supported or the result
// does not validate (the lines say what to supply); 2 bad input (a YAML syntax error, an
// unknown tag, a cyclic alias, a value of the wrong type: one line with line:column; a missing
// file; bad flags).
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "distill/boxes/model_paths.h"
#include "distill/config/config_loader.h"
#include "distill/config/config_validator.h"
#include "distill/torchdistill/importer.h"
#include "google/protobuf/text_format.h"
#include "hooks/model.h"
#include "tools/tool_util.h"

ABSL_FLAG(std::string, yaml, "", "The torchdistill YAML config to import. Required.");
ABSL_FLAG(std::string, out, "",
          "Where to write the libkd config (protobuf text); default: stdout.");
ABSL_FLAG(int64_t, seed, 0, "run.seed of the result (torchdistill takes it on its command line)");
ABSL_FLAG(std::string, name, "", "run.name of the result; default: the YAML file's stem");
ABSL_FLAG(std::string, teacher_mode, "as_is",
          "The stages' teacher_mode: as_is (torchdistill's boxes never set the teacher's mode: "
          "TEACHER_AS_IS, with a note) or eval (libkd's default: the teacher in eval mode each "
          "epoch)");

namespace kd {
namespace {

constexpr char kTool[] = "import_torchdistill";

int Run() {
  const std::string yaml = absl::GetFlag(FLAGS_yaml);
  if (yaml.empty()) return Fail(kTool, "--yaml is required (see --help)");
  // The output is checked before anything is read: never the YAML itself, never through a
  // link or into /dev (an --out of /dev/stdout would replace the machine's link with a file).
  const std::string out = absl::GetFlag(FLAGS_out);
  if (!out.empty()) {
    if (SameFile(ResolveUserPath(out), ResolveUserPath(yaml))) {
      return Fail(kTool, absl::StrCat("--out ", out, " is --yaml's file: the import would "
                                      "overwrite what it reads; give --out a file of its own"));
    }
    if (absl::Status writable = CheckWritablePath(ResolveUserPath(out)); !writable.ok()) {
      return Fail(kTool, absl::StrCat("--out: ", writable.message()));
    }
  }
  const std::string teacher_mode = absl::GetFlag(FLAGS_teacher_mode);
  if (teacher_mode != "as_is" && teacher_mode != "eval") {
    return Fail(kTool, absl::StrCat("--teacher_mode must be as_is or eval, got \"",
                                    teacher_mode, "\""));
  }
  const std::string base_dir = std::filesystem::path(ResolveUserPath(yaml)).parent_path();
  absl::StatusOr<torchdistill::Import> imported = torchdistill::ImportFile(
      ResolveUserPath(yaml),
      {.run_name = absl::GetFlag(FLAGS_name),
       .seed = absl::GetFlag(FLAGS_seed),
       .module_paths = [&](const ModelConfig& model) { return ModelModulePaths(model, base_dir); },
       .teacher_mode = teacher_mode == "eval" ? StageConfig::TEACHER_EVAL
                                              : StageConfig::TEACHER_AS_IS});
  if (!imported.ok()) {
    std::cerr << TerminalSafe(imported.status().message()) << std::endl;
    return 2;
  }
  std::string text;
  google::protobuf::TextFormat::PrintToString(imported->config, &text);
  text = "# Imported from " + yaml + " by //tools:import_torchdistill.\n" + text;
  if (out.empty()) {
    std::cout << text << std::flush;
  } else if (absl::Status written = WriteFileAtomically(ResolveUserPath(out), text);
             !written.ok()) {
    return Fail(kTool, written.message());
  }
  // What the YAML's keys and values put in these lines is echoed, never obeyed.
  for (const std::string& note : imported->notes) {
    std::cerr << "note: " << TerminalSafe(note) << "\n";
  }
  for (const std::string& line : imported->unsupported) std::cerr << TerminalSafe(line) << "\n";
  bool invalid = false;
  absl::StatusOr<LoadedConfig> loaded = ParseConfig(text, out.empty() ? "<stdout>" : out);
  if (!loaded.ok()) {
    std::cerr << TerminalSafe(loaded.status().message()) << "\n";
    invalid = true;
  } else {
    for (const ConfigProblem& problem : ValidateConfig(*loaded)) {
      std::cerr << TerminalSafe(problem.ToString()) << "\n";
      invalid |= problem.is_error();
    }
  }
  std::cerr << std::flush;
  return imported->unsupported.empty() && !invalid ? 0 : 1;
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Imports a torchdistill YAML config as a libkd config (protobuf text), reporting each "
      "key without a translation.\n"
      "Usage: bazel run //tools:import_torchdistill -- --yaml=config.yaml [--out=config.pbtxt] "
      "[--seed=N] [--name=NAME]");
  kd::ParseFlagsOrExit(argc, argv, kd::kTool);
  return kd::FinishOutput(kd::kTool, kd::Run());
}
