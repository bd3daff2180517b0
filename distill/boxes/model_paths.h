// The models of a config, built as a box builds them, and the module paths the
// config names checked against them (`//tools:validate_config --check_files`).
//
//   KD_ASSIGN_OR_RETURN(std::unique_ptr<kd::Model> student,
//                       kd::LoadModel(config.student(), base_dir, "student"));
//   for (const kd::ConfigProblem& p : kd::CheckModulePaths(loaded, base_dir)) ...
#ifndef LIBKD_DISTILL_BOXES_MODEL_PATHS_H_
#define LIBKD_DISTILL_BOXES_MODEL_PATHS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "distill/config/config_loader.h"
#include "distill/config/distill_config.pb.h"
#include "hooks/model.h"

namespace kd {

// The model `config` describes: native from the model registry, or a
// TorchScript file, then its src_ckpt loaded. Relative paths are taken from
// `base_dir`. Errors name `role` and the field ("student.native: ...").
absl::StatusOr<std::unique_ptr<Model>> LoadModel(const ModelConfig& config,
                                                 const std::string& base_dir,
                                                 absl::string_view role);

// The module paths of the model `config` builds (a registered key, or a file that exists), in
// NamedModules' order, its src_ckpt not loaded; none where it cannot be built. What
// torchdistill's importer resolves negative indices in paths against (ImportOptions).
std::vector<std::string> ModelModulePaths(const ModelConfig& config, const std::string& base_dir);

// A model handed to MakeBox (BoxInputs) for `role`: `config` may give its src_ckpt (loaded as
// LoadModel loads it), not a model of its own (InvalidArgument naming both).
absl::StatusOr<std::unique_ptr<Model>> AdoptModel(std::unique_ptr<Model> model,
                                                  const ModelConfig& config,
                                                  const std::string& base_dir,
                                                  absl::string_view role);

// `model` with `config.src_ckpt` loaded into it (if set), its tensors checked finite.
absl::StatusOr<std::unique_ptr<Model>> LoadSourceCheckpoint(std::unique_ptr<Model> model,
                                                            const ModelConfig& config,
                                                            const std::string& base_dir,
                                                            absl::string_view role);

// The TorchScript `model` frozen and optimized for inference (ModelConfig.optimize_for_inference):
// torch::jit::freeze then torch::jit::optimize_for_inference, on a copy in eval mode (which
// keeps a `training` attribute, false); the model itself is not changed.
// Call it once the model is on its device (the frozen constants stay where they are).
// InvalidArgument, naming `role`, for a native model or a module freezing rejects.
absl::StatusOr<std::unique_ptr<Model>> OptimizeForInference(const Model& model,
                                                            absl::string_view role);

// Builds the teacher and the student of `loaded` (without reading src_ckpt) and
// checks every module path the config names against them, each problem at its
// file:line:column: forward hooks, frozen modules, parameter groups, and
// parameter names read by criterion terms (io: PARAMETER). Unknown paths name
// the nearest existing ones. A model that cannot be built is one problem at its
// field.
std::vector<ConfigProblem> CheckModulePaths(const LoadedConfig& loaded,
                                            const std::string& base_dir);

}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_MODEL_PATHS_H_
