#include "tools/teacher_package.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "tools/tool_util.h"

namespace kd {

absl::StatusOr<PackageExporter> FindPackageExporter(const std::string& python) {
  PackageExporter exporter;
  exporter.python = python;
  if (exporter.python.empty()) {
    exporter.python = InstallerVenv() + "/bin/python";
  } else {
    exporter.python = ResolveUserPath(exporter.python);
  }
  if (access(exporter.python.c_str(), X_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--teacher_format=aoti: no Python at ", exporter.python,
        " to export the teacher: run tools/install_deps.sh or give --python=PYTHON (with torch)"));
  }
  for (const std::string& root : {std::string("."), ResolveUserPath(".")}) {
    if (std::filesystem::exists(std::filesystem::path(root) / "tools/export_teacher.py") &&
        std::filesystem::exists(std::filesystem::path(root) / "distill/models/fashion_cnn.py")) {
      exporter.root = std::filesystem::absolute(root).string();
      return exporter;
    }
  }
  return absl::FailedPreconditionError(
      "--teacher_format=aoti: tools/export_teacher.py and distill/models/fashion_cnn.py are "
      "neither in the program's runfiles nor here: run it with bazel run from the repository");
}

namespace {

// The value of a scalar kwarg as a Python literal (export_teacher's --kwargs).
absl::StatusOr<std::string> PythonLiteral(const Kwarg& kwarg) {
  switch (kwarg.value_case()) {
    case Kwarg::kInteger:
      return absl::StrCat(kwarg.integer());
    case Kwarg::kNumber:
      return absl::StrFormat("%.17g", kwarg.number());
    case Kwarg::kBoolean:
      return std::string(kwarg.boolean() ? "True" : "False");
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "--teacher_format=aoti: the teacher's kwarg ", kwarg.name(),
          " is not a number or boolean; export it with tools/export_teacher.py yourself"));
  }
}

}  // namespace

// Exports part 1's teacher (`teacher_config`'s fashion_cnn with the state dict at `state`) as
// the package `package`, with the module values `kd_config` hooks on its teacher as extra
// outputs; the exporter's output goes to `log`.
absl::Status ExportTeacherPackage(const PackageExporter& exporter,
                                  const DistillConfig& teacher_config,
                                  const DistillConfig& kd_config, const std::string& state,
                                  const std::string& package, const std::string& log) {
  const PluginConfig& native = teacher_config.student().native();
  if (native.key() != "fashion_cnn") {
    return absl::InvalidArgumentError(
        absl::StrCat("--teacher_format=aoti exports a fashion_cnn teacher (its Python twin is "
                     "distill/models/fashion_cnn.py); this teacher is \"",
                     native.key(),
                     "\": export it with tools/export_teacher.py and give the KD config "
                     "teacher { aoti_package: ... }"));
  }
  std::vector<std::string> kwargs;
  int64_t in_channels = 1;
  for (const Kwarg& kwarg : native.kwargs()) {
    KD_ASSIGN_OR_RETURN(std::string value, PythonLiteral(kwarg));
    kwargs.push_back(absl::StrCat(kwarg.name(), "=", value));
    if (kwarg.name() == "in_channels") in_channels = kwarg.integer();
  }
  std::vector<std::string> hooks;
  std::vector<const StageConfig*> stages;
  if (kd_config.has_train()) stages.push_back(&kd_config.train());
  for (const StageConfig& stage : kd_config.stages()) stages.push_back(&stage);
  for (const StageConfig* stage : stages) {
    for (const ForwardHookConfig& hook : stage->teacher().forward_hooks()) {
      if (hook.module_path().empty() && !hook.requires_input()) continue;  // the output
      const char* io = hook.requires_input() && hook.requires_output() ? "both"
                       : hook.requires_input()                         ? "input"
                                                                       : "output";
      hooks.push_back(absl::StrCat(hook.module_path(), ":", io));
    }
  }
  std::vector<std::string> args = {exporter.python,
                                   "tools/export_teacher.py",
                                   "--model=distill.models.fashion_cnn:FashionCnn",
                                   absl::StrCat("--kwargs=", absl::StrJoin(kwargs, ",")),
                                   absl::StrCat("--state=", state),
                                   absl::StrCat("--input_shape=2,", in_channels, ",28,28"),
                                   absl::StrCat("--out=", package)};
  if (!hooks.empty()) args.push_back(absl::StrCat("--hooks=", absl::StrJoin(hooks, ",")));
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addchdir_np(&actions, exporter.root.c_str());
  pid_t pid = 0;
  const int error = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    return absl::InternalError(
        absl::StrCat("cannot start ", exporter.python, ": ", std::strerror(error)));
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(
        absl::StrCat("exporting the teacher as an AOTInductor package failed (",
                     WIFEXITED(status) ? absl::StrCat("exit ", WEXITSTATUS(status))
                                       : absl::StrCat("signal ", WTERMSIG(status)),
                     "): see ", log));
  }
  return absl::OkStatus();
}

}  // namespace kd
