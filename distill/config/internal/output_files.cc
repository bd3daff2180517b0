#include "distill/config/internal/output_files.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "distill/config/config_loader.h"

namespace kd {
namespace config_internal {

void CheckOutputFiles(const DistillConfig& config, const ConfigLocator& root, Checker& checker) {
  struct File {
    std::string path;
    std::string field;  // "teacher.src_ckpt"
    TextPosition at;
  };
  std::vector<File> inputs, outputs;
  auto add = [](std::vector<File>& files, const std::string& path, const ConfigLocator& loc,
                const std::string& section, const char* field) {
    if (!path.empty()) {
      files.push_back({ResolveUserPath(path), absl::StrCat(section, ".", field), loc.Of(field)});
    }
  };
  if (!checker.loaded().file.empty()) {
    inputs.push_back({ResolveUserPath(checker.loaded().file), "the config itself", root.self()});
  }
  for (const char* section : {"teacher", "student"}) {
    const bool teacher = std::string(section) == "teacher";
    if (teacher ? !config.has_teacher() : !config.has_student()) continue;
    const ModelConfig& model = teacher ? config.teacher() : config.student();
    const ConfigLocator loc = root.Nested(section);
    add(inputs, model.torchscript(), loc, section, "torchscript");
    add(inputs, model.aoti_package(), loc, section, "aoti_package");
    add(inputs, model.src_ckpt(), loc, section, "src_ckpt");
    add(outputs, model.dst_ckpt(), loc, section, "dst_ckpt");
  }
  if (config.has_checkpoint()) {
    add(inputs, config.checkpoint().resume_from(), root.Nested("checkpoint"), "checkpoint",
        "resume_from");
  }
  // A dataset's string kwargs that name a file or a folder that exists (its root, a file of
  // its own): an output there, or inside that folder, would write into the data.
  for (int i = 0; i < config.datasets_size(); ++i) {
    const DatasetConfig& dataset = config.datasets(i);
    for (int k = 0; k < dataset.kwargs_size(); ++k) {
      const Kwarg& kwarg = dataset.kwargs(k);
      if (kwarg.value_case() != Kwarg::kStr || kwarg.str().empty()) continue;
      std::error_code error;
      if (!std::filesystem::exists(ResolveUserPath(kwarg.str()), error)) continue;
      inputs.push_back({ResolveUserPath(kwarg.str()),
                        absl::StrCat("datasets[", i, "] (\"", dataset.id(), "\") ", kwarg.name()),
                        root.Nested("datasets", i).Nested("kwargs", k).Of("str")});
    }
  }
  // The stages' models: dst_ckpt files are written; a src_ckpt is read, unless a stage's
  // dst_ckpt writes it (a hint stage's student read by the next stage).
  const std::vector<LocatedStage> stages = StagesInRunOrder(config, root);
  std::vector<File> stage_outputs;
  for (const auto& [stage, loc] : stages) {
    add(stage_outputs, stage->teacher().dst_ckpt(), loc.Nested("teacher"), "teacher", "dst_ckpt");
    add(stage_outputs, stage->student().dst_ckpt(), loc.Nested("student"), "student", "dst_ckpt");
  }
  for (const auto& [stage, loc] : stages) {
    for (const char* role : {"teacher", "student"}) {
      const StageModelConfig& model =
          std::string(role) == "teacher" ? stage->teacher() : stage->student();
      if (model.src_ckpt().empty()) continue;
      const std::string path = ResolveUserPath(model.src_ckpt());
      const bool written = std::any_of(stage_outputs.begin(), stage_outputs.end(),
                                       [&](const File& out) { return SameFile(out.path, path); });
      if (!written) add(inputs, model.src_ckpt(), loc.Nested(role), role, "src_ckpt");
    }
  }
  outputs.insert(outputs.end(), stage_outputs.begin(), stage_outputs.end());
  // checkpoint.dir is taken from the run folder: a ".." would put the run's checkpoints
  // (and what --overwrite removes) outside it. A folder elsewhere is given absolute.
  if (const std::string& dir = config.checkpoint().dir();
      !dir.empty() && !absl::StartsWith(dir, "/")) {
    for (absl::string_view part : absl::StrSplit(dir, '/')) {
      if (part == "..") {
        checker.Add(root.Nested("checkpoint").Of("dir"),
                    absl::StrCat("checkpoint.dir \"", absl::CHexEscape(dir),
                                 "\" climbs out of the run folder with \"..\"; give a folder "
                                 "inside it, or an absolute path for one elsewhere"));
        break;
      }
    }
  }
  // The memory snapshot (evaluation.memory_leak_detection.snapshot_path).
  add(outputs, config.evaluation().memory_leak_detection().snapshot_path(),
      root.Nested("evaluation").Nested("memory_leak_detection"),
      "evaluation.memory_leak_detection", "snapshot_path");
  for (size_t o = 0; o < outputs.size(); ++o) {
    const File& out = outputs[o];
    // One problem an output: the first input it would overwrite or write into, else what the
    // writer would refuse at the end of the run (a link, a FIFO or a device in its place, a
    // folder in /dev, /proc or /sys), refused now, before the first step.
    bool found = false;
    for (const File& in : inputs) {
      if (SameFile(out.path, in.path)) {
        checker.Add(out.at, absl::StrCat(out.field, " \"", out.path, "\" is ", in.field,
                                         in.field == "the config itself" ? "" : "'s file",
                                         ": the run would overwrite what it reads; give ",
                                         out.field, " a file of its own"));
        found = true;
        break;
      }
      // Into a dataset's folder: a file directly in it, or one that is already there at any
      // depth (one of the data's own files); a run folder below it is the user's choice.
      std::error_code error;
      if (std::filesystem::is_directory(in.path, error) && IsWithinFolder(out.path, in.path) &&
          (SameFile(std::filesystem::path(out.path).parent_path().string(), in.path) ||
           std::filesystem::exists(out.path, error))) {
        checker.Add(out.at, absl::StrCat(out.field, " \"", out.path, "\" is inside ", in.field,
                                         "'s folder: the run would write into the data it reads; "
                                         "give ", out.field, " a file elsewhere"));
        found = true;
        break;
      }
    }
    if (!found) {
      if (absl::Status writable = CheckWritablePath(out.path);
          absl::IsInvalidArgument(writable)) {
        checker.Add(out.at, absl::StrCat(out.field, ": ", writable.message()));
      }
    }
    for (size_t p = 0; p < o; ++p) {
      if (SameFile(out.path, outputs[p].path)) {
        checker.Add(out.at, absl::StrCat(out.field, " \"", out.path, "\" is ", outputs[p].field,
                                         "'s file too: give each model a file of its own"));
      }
    }
  }
}

}  // namespace config_internal
}  // namespace kd
