#include "distill/config/internal/model_checks.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "distill/config/plugin_kinds.h"

namespace kd {
namespace config_internal {
namespace {

void CheckModel(const ModelConfig& model, const ConfigLocator& loc, Checker& c) {
  switch (model.source_case()) {
    case ModelConfig::SOURCE_NOT_SET:
      c.Add(loc.self(), absl::StrCat("missing required field \"torchscript\", \"native\" or "
                                     "\"aoti_package\" in ",
                                     loc.type_name()));
      break;
    case ModelConfig::kTorchscript:
      if (model.torchscript().empty()) {
        c.Add(loc.Of("torchscript"), "empty torchscript path");
      }
      c.CheckFile(model.torchscript(), loc, "torchscript");
      break;
    case ModelConfig::kNative: {
      const ConfigLocator native = loc.Nested("native");
      c.CheckPlugin(kModelKind, model.native().key(), model.native().kwargs(), native);
      break;
    }
    case ModelConfig::kAotiPackage:
      if (model.aoti_package().empty()) c.Add(loc.Of("aoti_package"), "empty aoti_package path");
      c.CheckFile(model.aoti_package(), loc, "aoti_package");
      for (const char* field : {"src_ckpt", "dst_ckpt"}) {
        if (loc.Written(field)) {
          c.Add(loc.Of(field), absl::StrCat("an AOTInductor package has its weights compiled in: "
                                            "drop ",
                                            field, " (export the weights you want)"));
        }
      }
      break;
  }
  c.CheckFile(model.src_ckpt(), loc, "src_ckpt");
}

// ModelConfig.optimize_for_inference: a TorchScript teacher's, with nothing to save.
void CheckOptimizeForInference(const DistillConfig& config, const ConfigLocator& root, Checker& c) {
  if (config.student().optimize_for_inference()) {
    c.Add(root.Nested("student").Of("optimize_for_inference"),
          "optimize_for_inference is for the teacher: the student trains");
  }
  if (config.student().has_aoti_package()) {
    c.Add(root.Nested("student").Of("aoti_package"),
          "an AOTInductor package is for the teacher: the student trains (give torchscript or "
          "native)");
  }
  const ModelConfig& teacher = config.teacher();
  if (!teacher.optimize_for_inference()) return;
  const ConfigLocator loc = root.Nested("teacher");
  if (!teacher.has_torchscript()) {
    c.Add(loc.Of("optimize_for_inference"),
          "optimize_for_inference needs a TorchScript teacher (torch::jit::freeze works on "
          "TorchScript modules); export it with torch.jit.script, or drop the flag");
  }
  if (!teacher.dst_ckpt().empty()) {
    c.Add(loc.Of("dst_ckpt"),
          "a teacher optimized for inference has no parameters to save: drop dst_ckpt or "
          "optimize_for_inference");
  }
}

}  // namespace

void CheckModels(const DistillConfig& config, const ConfigLocator& root, bool student_handed_in,
                 Checker& checker) {
  if (config.has_student()) {
    CheckModel(config.student(), root.Nested("student"), checker);
  } else if (!student_handed_in) {
    checker.Missing(root, "student");
  }
  if (config.has_teacher()) CheckModel(config.teacher(), root.Nested("teacher"), checker);
  CheckOptimizeForInference(config, root, checker);
}

}  // namespace config_internal
}  // namespace kd
