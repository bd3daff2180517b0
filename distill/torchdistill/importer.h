// torchdistill (1.x) YAML configs imported into libkd's DistillConfig
// (//tools:import_torchdistill).
//
//   KD_ASSIGN_OR_RETURN(kd::torchdistill::Import imported,
//                       kd::torchdistill::ImportFile("configs/kd/resnet18_from_resnet34.yaml"));
//   for (const std::string& line : imported.unsupported) std::cerr << line << "\n";
//   // imported.config: the DistillConfig, complete where everything translated
//
// Every key of the input is translated, or reported as
//   file.yaml:LINE:COL: <what> is not supported: <why / what to do>
// (`unsupported`: the result lacks it), or, for settings that change nothing in libkd (a
// download flag, pin_memory, DataParallel on one device), as a note with the same prefix.
// Keys starting with "_" are anchors' holders, which torchdistill ignores too.
//
// What maps (docs/torchdistill_import.md has the table): datasets from !import_call of
// torchvision.datasets.FashionMNIST (its transforms: RandomCrop with padding,
// RandomHorizontalFlip, ToTensor, Normalize) and torch.utils.data.Subset of a range; models
// whose key is a libkd model; train (one stage, or stage1, stage2, ...) with loaders (samplers
// RandomSampler / SequentialSampler), teacher/student sections (forward_hook, sequential,
// frozen_modules, requires_grad, wrapper, src_ckpt/dst_ckpt, forward_proc), optimizer (with
// module_wise_kwargs, max_grad_norm, grad_accum_step), scheduler (scheduling_step), criterion
// (WeightedSumLoss's sub_terms; SimpleLossWrapper's input/target; a loss's own kwargs through
// its TorchdistillLossRule, distill/losses/torchdistill_rule.h); test's test_data_loader.
#ifndef LIBKD_DISTILL_TORCHDISTILL_IMPORTER_H_
#define LIBKD_DISTILL_TORCHDISTILL_IMPORTER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "distill/config/distill_config.pb.h"

namespace kd {
namespace torchdistill {

struct Import {
  DistillConfig config;
  std::vector<std::string> unsupported;  // "file:line:col: X is not supported: why"
  std::vector<std::string> notes;        // "file:line:col: X: what libkd does instead"
};

struct ImportOptions {
  std::string run_name;  // run.name; default: the file's stem
  int64_t seed = 0;      // run.seed (torchdistill takes it on the command line)
  // The module paths of the model a ModelConfig builds (its NamedModules, in order), for
  // torchdistill's negative indices in paths ("layer1.-1.relu": layer1's last child, as its
  // get_module takes them). Unset, or empty for a model it cannot build: such paths are written
  // as they are, and validation names them.
  std::function<std::vector<std::string>(const ModelConfig&)> module_paths;
  // The stages' teacher_mode: torchdistill's (TEACHER_AS_IS: its boxes never set the teacher's
  // mode) by default, with a note; TEACHER_EVAL keeps libkd's default (no field written).
  StageConfig::TeacherMode teacher_mode = StageConfig::TEACHER_AS_IS;
};

// InvalidArgument "file:line:col: ..." for YAML that does not parse, an unknown tag, a cyclic
// alias or a value of the wrong type where the translation needs one.
absl::StatusOr<Import> ImportFile(const std::string& path, const ImportOptions& options = {});
absl::StatusOr<Import> ImportText(const std::string& text, const std::string& file,
                                  const ImportOptions& options = {});

}  // namespace torchdistill
}  // namespace kd

#endif  // LIBKD_DISTILL_TORCHDISTILL_IMPORTER_H_
