// How a torchdistill auxiliary model wrapper becomes a libkd auxiliary module
// (StageModelConfig.auxiliary_modules): a module declares, where it registers, the wrapper it
// stands for, and //tools:import_torchdistill applies it (distill/torchdistill/).
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

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/registry.h"

namespace kd {

struct TorchdistillAuxRule {
  // Where the wrapper keeps the model: its paths are "<model_prefix><path>".
  std::string model_prefix = "model.";

  // One module (Linear4CCKD's "linear"):
  // The wrapper's submodule: the libkd module's name, which hooks and losses name.
  std::string name;
  // The kwarg naming the module whose value it runs on: {path, io} (input_module), or a path
  // whose output it takes (input_module_path).
  std::string input_kwarg;
  // Dict kwargs whose entries become kwargs of their own (linear_kwargs).
  std::vector<std::string> flattened;
  // Boolean kwargs left out when true, as libkd's module always has them (a linear's bias).
  std::vector<std::string> true_by_default;
  // The wrapper's other submodules, which libkd has no need of (Linear4CRD's "empty", whose
  // input is the batch's supplementary dict): hooks on them are left out.
  std::vector<std::string> unneeded;
  // The kwarg naming the module's own checkpoint file (AuxiliaryModuleConfig.ckpt).
  std::string ckpt_kwarg;
  // Kwargs that change nothing in libkd, with why (dropped with a note): SSWrapper4SSKD's
  // freezes_ss_module, which only keeps the module out of DistributedDataParallel.
  std::vector<std::pair<std::string, std::string>> dropped;
  // The libkd module's key when it is not the wrapper's (Teacher4FactorTransfer's paraphraser:
  // Paraphraser4FactorTransfer).
  std::string single_module_key;
  // A kwarg {sequential: [...]} trimming the model for the stage (StageModelConfig.sequential):
  // Teacher4FactorTransfer's minimal.
  std::string minimal_kwarg;
  // Or nothing to add, and why (SRDModelWrapper's projector, whose output nothing reads): the
  // wrapper is left out with this note, its model's paths still lose the prefix.
  std::string left_out;

  // Or one module per entry of a dict kwarg (VariationalDistributor4VID's regressors:
  // {regressor1: {path, io, kwargs}}), each a `module_key` module named as its entry, which the
  // wrapper's paths name "<module_path_prefix><entry>" (regressor_dict.regressor1):
  std::string modules_kwarg;
  std::string module_key;
  std::string module_path_prefix;
  // The entry's kwargs for the module, under the first of these names it has; none: the entry's
  // own keys but path and io (Student4ICKD's embeddings: {path, io, in_channels, out_channels}),
  // dicts among them flattened (Connector4DAB's conv2d_kwargs) or standing for a switch
  // (its bn2d_kwargs: uses_bn true, the batch norm's width being the convolution's output).
  std::vector<std::string> module_kwargs_names;
  std::vector<std::string> module_flattened;
  std::vector<std::pair<std::string, std::string>> module_switches;

  // Or a chain of `module_key` modules from a list kwarg (Student4KnowledgeReview's abfs:
  // [{path, io, kwargs}]), built deepest first as torchdistill's wrapper builds it: the list's
  // last entry is "<module_path_prefix>0" (libkd's "<chain_name>0", without attention), each
  // entry before it the next (with attention: kwarg `chain_switch` true), run on its value and
  // the previous module's residual (element 1 of its output, an extra input) resized to the
  // matching entry of `chain_sizes_kwarg` (kwarg "size").
  std::string chain_kwarg;
  std::string chain_sizes_kwarg;
  std::vector<int64_t> chain_default_sizes;
  std::string chain_name;
  std::string chain_switch;
  // torchdistill's kwarg names of each module -> libkd's (the knowledge-review sample's
  // in_channel: torchdistill 1.1.5's AttentionBasedFusion takes in_channels).
  std::vector<std::pair<std::string, std::string>> module_renamed;
};

// torchdistill's wrapper key -> its rule ("torchdistill_aux_rule" registry kind).
Registry<TorchdistillAuxRule>& TorchdistillAuxRules();

}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_TORCHDISTILL_AUX_RULE_H_
