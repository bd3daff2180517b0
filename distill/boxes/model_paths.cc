#include "distill/boxes/model_paths.h"

#include <algorithm>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/jit/api/module.h>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/nearest.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "distill/config/config_loader.h"
#include "distill/config/kwargs.h"
#include "distill/models/model_registry.h"
#include "hooks/aoti_model.h"
#include "hooks/sequential_model.h"
#include "hooks/torchscript_model.h"

namespace kd {
namespace {

absl::StatusOr<std::unique_ptr<Model>> BuildModel(const ModelConfig& config,
                                                  const std::string& base, absl::string_view role) {
  if (config.has_native()) {
    const PluginConfig& native = config.native();
    KD_ASSIGN_OR_RETURN(Kwargs kwargs, PluginKwargs(ModelRegistry(), native.key(), native.kwargs(),
                                                    absl::StrCat("model \"", native.key(), "\"")));
    absl::StatusOr<std::unique_ptr<Model>> made = MakeRegisteredModel(native.key(), kwargs);
    if (!made.ok()) return WithContext(absl::StrCat(role, ".native"), made.status());
    return made;
  }
  if (!config.torchscript().empty()) {
    absl::StatusOr<std::unique_ptr<Model>> loaded =
        LoadTorchScriptModel(ResolveAgainst(base, config.torchscript()));
    if (!loaded.ok()) return WithContext(absl::StrCat(role, ".torchscript"), loaded.status());
    return loaded;
  }
  if (!config.aoti_package().empty()) {
    // One intra-op thread for the run: the package's kernels on the calling thread too.
    absl::StatusOr<std::unique_ptr<Model>> loaded =
        LoadAotiModel(ResolveAgainst(base, config.aoti_package()),
                      {.single_threaded = at::get_num_threads() == 1});
    if (!loaded.ok()) return WithContext(absl::StrCat(role, ".aoti_package"), loaded.status());
    return loaded;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(role, ": no source (set torchscript, native or aoti_package)"));
}

class PathChecker {
 public:
  explicit PathChecker(const LoadedConfig& loaded) : loaded_(loaded) {}

  void SetModels(const Model* teacher, const Model* student) {
    teacher_ = teacher;
    student_ = student;
  }

  void CheckStage(const StageConfig& stage, const ConfigLocator& loc) {
    // The models the stage runs: the chains of `sequential` sections, whose paths the rest of
    // the stage names.
    std::unique_ptr<Model> teacher_chain, student_chain;
    const Model* teacher =
        StageModel(stage.teacher(), loc.Nested("teacher"), teacher_, teacher_chain);
    const Model* student =
        StageModel(stage.student(), loc.Nested("student"), student_, student_chain);
    CheckStageModel(stage.teacher(), loc.Nested("teacher"), teacher);
    CheckStageModel(stage.student(), loc.Nested("student"), student);
    const OptimizerConfig& optimizer = stage.optimizer();
    for (int i = 0; i < optimizer.param_groups_size(); ++i) {
      const ParamGroupConfig& group = optimizer.param_groups(i);
      Path(group.model() == ParamGroupConfig::TEACHER ? teacher : student, group.module_path(),
           loc.Nested("optimizer").Nested("param_groups", i).Of("module_path"));
    }
    const CriterionConfig& criterion = stage.criterion();
    for (int t = 0; t < criterion.terms_size(); ++t) {
      for (int i = 0; i < criterion.terms(t).inputs_size(); ++i) {
        const IoRef& ref = criterion.terms(t).inputs(i);
        if (ref.io() != IoRef::PARAMETER) continue;
        Parameter(ref.source() == IoRef::TEACHER ? teacher : student, ref.path(),
                  loc.Nested("criterion").Nested("terms", t).Nested("inputs", i).Of("path"));
      }
    }
  }

  std::vector<ConfigProblem> TakeProblems() { return std::move(problems_); }

  void Add(TextPosition at, std::string message) {
    problems_.push_back({.file = loaded_.file, .at = at, .message = std::move(message)});
  }

 private:
  // `model`, or the chain of its modules `config.sequential` lists (kept in `chain`); null when
  // the chain cannot be made (reported).
  const Model* StageModel(const StageModelConfig& config, const ConfigLocator& loc,
                          const Model* model, std::unique_ptr<Model>& chain) {
    if (model == nullptr || config.sequential().empty()) return model;
    const size_t problems = problems_.size();
    for (int i = 0; i < config.sequential_size(); ++i) {
      Path(model, config.sequential(i), loc.Of("sequential", i));
    }
    if (problems_.size() > problems) return nullptr;
    absl::StatusOr<std::unique_ptr<Model>> made = MakeSequentialModel(
        *model, std::vector<std::string>(config.sequential().begin(), config.sequential().end()));
    if (!made.ok()) {
      Add(loc.Of("sequential"), std::string(made.status().message()));
      return nullptr;
    }
    chain = *std::move(made);
    return chain.get();
  }

  void CheckStageModel(const StageModelConfig& config, const ConfigLocator& loc,
                       const Model* model) {
    for (int i = 0; i < config.forward_hooks_size(); ++i) {
      Path(model, config.forward_hooks(i).module_path(),
           loc.Nested("forward_hooks", i).Of("module_path"));
    }
    for (int i = 0; i < config.frozen_modules_size(); ++i) {
      Path(model, config.frozen_modules(i), loc.Of("frozen_modules", i));
    }
  }

  void Path(const Model* model, const std::string& path, TextPosition at) {
    if (model == nullptr) return;  // not built (reported), or no teacher (the validator's)
    if (absl::Status found = model->CheckModulePath(path); !found.ok()) {
      Add(at, std::string(found.message()));
    }
  }

  void Parameter(const Model* model, const std::string& name, TextPosition at) {
    if (model == nullptr || name.empty()) return;
    std::vector<std::string> names;
    for (const auto& list : {model->NamedParameters(), model->NamedBuffers()}) {
      for (const auto& [existing, tensor] : list) {
        if (existing == name) return;
        names.push_back(existing);
      }
    }
    Add(at,
        absl::StrCat("no parameter or buffer \"", name, "\" in the model; ", Suggest(name, names)));
  }

  const LoadedConfig& loaded_;
  const Model* teacher_ = nullptr;
  const Model* student_ = nullptr;
  std::vector<ConfigProblem> problems_;
};

// A model's loaded weights must be finite: a file saved from a run that diverged would
// otherwise show only as a NaN loss at the first step. Names the first tensor that is not.
absl::Status CheckFinite(const Model& model, absl::string_view what, const std::string& file) {
  for (const auto& list : {model.NamedParameters(), model.NamedBuffers()}) {
    for (const auto& [name, tensor] : list) {
      if (!tensor.is_floating_point() || tensor.numel() == 0) continue;
      const at::Tensor bad = tensor.isfinite().logical_not();
      const int64_t count = bad.sum().item<int64_t>();
      if (count > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": ", file, ": tensor \"", name, "\" holds ", count,
                         " NaN or infinite value", count == 1 ? "" : "s", " (of ", tensor.numel(),
                         "): it was saved from a run that diverged; give weights from before it"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> ModelModulePaths(const ModelConfig& config, const std::string& base_dir) {
  absl::StatusOr<std::unique_ptr<Model>> model = BuildModel(config, base_dir, "model");
  if (!model.ok()) return {};
  std::vector<std::string> paths;
  for (const ModuleInfo& m : (*model)->NamedModules()) paths.push_back(m.path);
  return paths;
}

absl::StatusOr<std::unique_ptr<Model>> LoadModel(const ModelConfig& config,
                                                 const std::string& base_dir,
                                                 absl::string_view role) {
  KD_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, BuildModel(config, base_dir, role));
  return LoadSourceCheckpoint(std::move(model), config, base_dir, role);
}

absl::StatusOr<std::unique_ptr<Model>> AdoptModel(std::unique_ptr<Model> model,
                                                  const ModelConfig& config,
                                                  const std::string& base_dir,
                                                  absl::string_view role) {
  if (config.source_case() != ModelConfig::SOURCE_NOT_SET) {
    return absl::InvalidArgumentError(
        absl::StrCat(role, ": the config names a model (",
                     config.has_torchscript() ? "torchscript"
                     : config.has_native()    ? "native"
                                              : "aoti_package",
                     ") and one was handed to MakeBox; drop one of them"));
  }
  return LoadSourceCheckpoint(std::move(model), config, base_dir, role);
}

absl::StatusOr<std::unique_ptr<Model>> LoadSourceCheckpoint(std::unique_ptr<Model> model,
                                                            const ModelConfig& config,
                                                            const std::string& base_dir,
                                                            absl::string_view role) {
  if (!config.src_ckpt().empty()) {
    absl::Status loaded =
        model->LoadState(ResolveAgainst(base_dir, config.src_ckpt()),
                         {.strict = !config.ignore_mismatched_sizes(),
                          .ignore_mismatched_sizes = config.ignore_mismatched_sizes()});
    if (!loaded.ok()) return WithContext(absl::StrCat(role, ".src_ckpt"), loaded);
    KD_RETURN_IF_ERROR(CheckFinite(*model, absl::StrCat(role, ".src_ckpt"),
                                   ResolveAgainst(base_dir, config.src_ckpt())));
  } else if (config.has_torchscript()) {
    KD_RETURN_IF_ERROR(CheckFinite(*model, absl::StrCat(role, ".torchscript"),
                                   ResolveAgainst(base_dir, config.torchscript())));
  }
  return model;
}

absl::StatusOr<std::unique_ptr<Model>> OptimizeForInference(const Model& model,
                                                            absl::string_view role) {
  const torch::jit::Module* module = GetTorchScriptModule(model);
  if (module == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(role,
                     ".optimize_for_inference: needs a TorchScript model (torch::jit::freeze "
                     "works on TorchScript modules), not a ",
                     model.kind(), " one; export it with torch.jit.script or drop the flag"));
  }
  KD_ASSIGN_OR_RETURN(torch::jit::Module optimized,
                      CallTorch(absl::StrCat(role, ".optimize_for_inference"),
                                absl::StatusCode::kInvalidArgument, [&] {
                                  torch::jit::Module eval = module->clone();
                                  eval.eval();
                                  torch::jit::Module frozen = torch::jit::freeze(eval);
                                  return torch::jit::optimize_for_inference(frozen);
                                }));
  // Freezing drops the `training` flag with the rest of the attributes; the box sets and
  // reads it (Module::train, is_training), and an optimized module is in eval mode for good.
  if (!optimized.hasattr("training")) {
    optimized.register_attribute("training", c10::BoolType::get(), false);
  }
  return MakeTorchScriptModel(optimized);
}

std::vector<ConfigProblem> CheckModulePaths(const LoadedConfig& loaded,
                                            const std::string& base_dir) {
  const DistillConfig& config = loaded.config;
  const ConfigLocator root = loaded.Root();
  PathChecker checker(loaded);
  auto build = [&](const ModelConfig& model, const char* role) -> std::unique_ptr<Model> {
    absl::StatusOr<std::unique_ptr<Model>> built = BuildModel(model, base_dir, role);
    if (built.ok()) return *std::move(built);
    checker.Add(root.Of(role), std::string(built.status().message()));
    return nullptr;
  };
  std::unique_ptr<Model> teacher, student;
  if (config.has_teacher()) teacher = build(config.teacher(), "teacher");
  if (config.has_student()) student = build(config.student(), "student");
  checker.SetModels(teacher.get(), student.get());
  for (const auto& [stage, loc] : StagesInRunOrder(config, root)) checker.CheckStage(*stage, loc);
  std::vector<ConfigProblem> problems = checker.TakeProblems();
  std::stable_sort(problems.begin(), problems.end(), [](const auto& a, const auto& b) {
    return std::pair(a.at.line, a.at.column) < std::pair(b.at.line, b.at.column);
  });
  return problems;
}

}  // namespace kd
