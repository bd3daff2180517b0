// Auxiliary modules: trainable modules next to a model (adaptation layers,
// connectors) that run on one of its recorded values after its forward; the box
// puts their outputs in the model's I/O dict under their names, trains their
// parameters with the student's and keeps them in checkpoints
// (StageModelConfig.auxiliary_modules).
//
//   auxiliary_modules {
//     name: "connector"  key: "conv_connector"
//     kwargs { name: "in_channels" integer: 8 }  kwargs { name: "out_channels" integer: 32 }
//     input { source: STUDENT path: "layer2" io: OUTPUT }
//   }
//
// Registered here: "conv_connector" (1x1 conv + batch norm, FitNet's regressor
// / DAB's connector), "ConvReg" (torchdistill's adaptation of that name: conv with bias, batch
// norm, ReLU), "linear" (a projection head); torchdistill's method
// modules under its class names (method_modules.cc, factor_transfer_modules.cc,
// knowledge_review_modules.cc): "Regressor4VID",
// "VarianceBranch4PAD", "Linear4CRD", "Linear4CCKD", "ChannelSimilarityEmbed",
// "Paraphraser4FactorTransfer", "Translator4FactorTransfer", "SSWrapper4SSKD", "Connector4DAB",
// "FeatureAdapter4KTAAD", "AffinityAdapter4KTAAD", "SRDModelWrapper", "AttentionBasedFusion"
// (which takes a second input: AuxiliaryModuleConfig.extra_inputs).
// A new one registers a factory with KD_REGISTER on AuxiliaryModuleRegistry().
#ifndef LIBKD_DISTILL_BOXES_AUX_MODULES_H_
#define LIBKD_DISTILL_BOXES_AUX_MODULES_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/ivalue_util.h"
#include "base/registry.h"

namespace torch::nn {
class AnyModule;
}  // namespace torch::nn

namespace kd {

// An auxiliary module: a native module whose forward takes one tensor (or up to three:
// its config's input and extra_inputs) and returns one, or a pair (a tuple in the I/O dict; a loss
// input picks one with IoRef.element).
using AuxiliaryModuleFactory =
    std::function<absl::StatusOr<torch::nn::AnyModule>(const Kwargs& kwargs)>;

// The auxiliary modules by config key ("auxiliary_module" registry kind).
Registry<AuxiliaryModuleFactory>& AuxiliaryModuleRegistry();

// The module `key` with `kwargs` checked against its contract.
absl::StatusOr<torch::nn::AnyModule> MakeAuxiliaryModule(absl::string_view key,
                                                         const Kwargs& kwargs);

}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_AUX_MODULES_H_
