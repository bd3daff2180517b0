// Checking a loaded distillation config before anything is built: every problem at once, each
// at its file:line:column, in file order.
//
//   KD_ASSIGN_OR_RETURN(kd::LoadedConfig loaded, kd::LoadConfig(path));
//   std::vector<kd::ConfigProblem> problems = kd::ValidateConfig(loaded);
//   if (problems.empty()) std::cout << "OK\n";   // kd::SummarizeConfig: config_summary.h
//
// Checked: unknown fields (from parsing); missing required fields; values out of range;
// registry keys of every plugin kind whose registry is linked into the program (unknown keys
// name the nearest and list the registered ones) and kwargs against what the plugin declared;
// ids and names that must be unique or must exist; criterion and auxiliary-module inputs that
// no forward hook of the stage records; a teacher referenced in a run without one; and, on
// request, that the files the config reads exist. Module paths are not checked against the
// models (that needs the models built).
#ifndef LIBKD_DISTILL_CONFIG_CONFIG_VALIDATOR_H_
#define LIBKD_DISTILL_CONFIG_CONFIG_VALIDATOR_H_

#include <string>
#include <vector>

#include "distill/config/config_loader.h"
#include "distill/config/distill_config.pb.h"

namespace kd {

struct ValidateOptions {
  // Also check that the files the config reads exist: TorchScript models, checkpoints to load,
  // `resume_from`. Relative paths are resolved with kd::ResolveUserPath. Default: false, since
  // configs are often written before their files exist.
  bool check_files = false;
  // Objects a program hands kd::MakeBox in place of config sections (distill/boxes/box.h's
  // BoxInputs): a model handed in counts as the config's teacher or student, datasets handed in
  // as the config's datasets of these ids.
  bool teacher_handed_in = false;
  bool student_handed_in = false;
  std::vector<std::string> handed_in_dataset_ids;
};

// Every problem of `loaded` (its parse problems included), sorted by position. The config is
// valid when none is an error (HasErrors); warnings name deprecated fields.
std::vector<ConfigProblem> ValidateConfig(const LoadedConfig& loaded,
                                          const ValidateOptions& options = {});

// Whether any of `problems` is an error.
bool HasErrors(const std::vector<ConfigProblem>& problems);

// The plugin kinds of configs (kConfigPluginKinds) whose registry is not linked into this
// program: ValidateConfig cannot check their keys and kwargs.
std::vector<std::string> UncheckedPluginKinds();

}  // namespace kd

#endif  // LIBKD_DISTILL_CONFIG_CONFIG_VALIDATOR_H_
