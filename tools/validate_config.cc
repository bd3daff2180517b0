// validate_config: checks a distillation config
// (distill/config/distill_config.proto) without running it. Prints "OK" and a
// paragraph describing the run, or every problem, one per line as
// file:line:column: message.
//
//   bazel run //tools:validate_config --
//   --config=tools/configs/fashion_mnist_kd.pbtxt
//
// With --check_files it also builds the teacher and the student and checks
// every module path the config names against them.
//
// Exit codes: 0 valid (warnings, e.g. deprecated field names, are printed
// before "OK"), 2 problems found or bad input (no --config, unreadable file).
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_join.h"
#include "base/file_util.h"
#include "distill/boxes/model_paths.h"
#include "distill/config/config_loader.h"
#include "distill/config/config_summary.h"
#include "distill/config/config_validator.h"
#include "tools/tool_util.h"

ABSL_FLAG(std::string, config, "",
          "Path of the config to check: a kd.DistillConfig in protobuf text "
          "format (see "
          "distill/config/distill_config.proto and tools/configs/). Relative "
          "paths are taken from the "
          "folder `bazel run` was called in. Required.");
ABSL_FLAG(bool, check_files, false,
          "Also check that the files the config reads exist (TorchScript "
          "models, checkpoints to "
          "load, resume_from), build the teacher and the student, and check "
          "every module path "
          "and parameter name the config names against them. Off by default, "
          "since configs are "
          "often written before their files exist.");

namespace kd {
namespace {

constexpr char kTool[] = "validate_config";

int Run() {
  const std::string path = absl::GetFlag(FLAGS_config);
  if (path.empty()) return Fail(kTool, "--config is required (see --help)");
  absl::StatusOr<std::string> text = ReadFile(ResolveUserPath(path), kMaxTextBytes);
  if (!text.ok()) return Fail(kTool, text.status().message());
  absl::StatusOr<LoadedConfig> loaded = ParseConfig(*text, path);
  if (!loaded.ok()) {
    // Syntax errors, already one per line as file:line:column: message.
    std::cout << loaded.status().message() << std::endl;
    return 2;
  }
  ValidateOptions options;
  options.check_files = absl::GetFlag(FLAGS_check_files);
  std::vector<ConfigProblem> problems = ValidateConfig(*loaded, options);
  if (options.check_files && !HasErrors(problems)) {
    // Module paths need the models, which need files and registry keys that
    // exist.
    for (ConfigProblem& problem : CheckModulePaths(*loaded, ResolveUserPath("."))) {
      problems.push_back(std::move(problem));
    }
  }
  for (const ConfigProblem& problem : problems) std::cout << problem.ToString() << "\n";
  if (HasErrors(problems)) return 2;

  std::cout << "OK\n" << SummarizeConfig(loaded->config) << "\n";
  if (const std::vector<std::string> unchecked = UncheckedPluginKinds(); !unchecked.empty()) {
    std::cout << "Not checked, as no registry of these kinds is linked into "
                 "this tool: keys and "
                 "kwargs of "
              << absl::StrJoin(unchecked, ", ") << ".\n";
  }
  std::cout << std::flush;
  return 0;
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Checks a libkd distillation config and prints OK with a summary of the "
      "run, or every "
      "problem as file:line:column: message (exit code 2).\n"
      "Usage: bazel run //tools:validate_config -- --config=path.pbtxt "
      "[--check_files]");
  kd::ParseFlagsOrExit(argc, argv, kd::kTool);
  return kd::FinishOutput(kd::kTool, kd::Run());
}
