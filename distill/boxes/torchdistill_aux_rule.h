// How a torchdistill auxiliary model wrapper becomes a libkd auxiliary module
// (StageModelConfig.auxiliary_modules): a module declares, where it registers, the wrapper it
// stands for, and //tools:import_torchdistill applies it (distill/config/torchdistill/).
//
// torchdistill wraps the model: its modules move under "model." and the wrapper adds its own
// submodule ("linear"), which hooks and losses then name. libkd keeps the model as it is and
// runs the module on a recorded value, under the submodule's name:
//   auxiliary_model_wrapper: {key: Linear4CCKD, kwargs: {input_module: {path: model.avgpool,
//                             io: output}, linear_kwargs: {in_features: 512, ...}}}
//   -> auxiliary_modules { name: "linear" key: "Linear4CCKD" kwargs { in_features: 512 ... }
//                          input { path: "avgpool" } }
// and the stage's paths lose their "model." (the importer does that).
#ifndef LIBKD_DISTILL_BOXES_TORCHDISTILL_AUX_RULE_H_
#define LIBKD_DISTILL_BOXES_TORCHDISTILL_AUX_RULE_H_

#include <string>
#include <vector>

#include "base/registry.h"

namespace kd {

struct TorchdistillAuxRule {
  // The wrapper's submodule: the libkd module's name, which hooks and losses name.
  std::string name;
  // The kwarg naming the module whose value it runs on: {path, io} (input_module), or a path
  // whose output it takes (input_module_path).
  std::string input_kwarg;
  // Dict kwargs whose entries become kwargs of their own (linear_kwargs).
  std::vector<std::string> flattened;
  // Boolean kwargs left out when true, as libkd's module always has them (a linear's bias).
  std::vector<std::string> true_by_default;
};

// torchdistill's wrapper key -> its rule ("torchdistill_aux_rule" registry kind).
Registry<TorchdistillAuxRule>& TorchdistillAuxRules();

}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_TORCHDISTILL_AUX_RULE_H_
