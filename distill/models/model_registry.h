// Native models by key: the registry a config's `native { key: ... kwargs ... }` picks from.
//
// libkd's own models (//distill/models:all_models) are "mlp", "lenet5", "fashion_cnn",
// "resnet20", "resnet32", "resnet56" and "wrn"; each is a torch::nn::Module whose children run
// through hook points (hooks/hook_point.h), so a hook on any of its module paths fires.
//
//   KD_ASSIGN_OR_RETURN(std::unique_ptr<kd::Model> student,
//                       kd::MakeRegisteredModel("fashion_cnn", {{"width", 4}}));
//   at::Tensor logits = student->Forward({images}).toTensor();  // [N, 1, 28, 28] -> [N, 10]
//
// A model of another library registers itself at the end of its .cc (whose cc_library has
// alwayslink = True, or the linker drops the registration), with the contract of its kwargs:
//
//   absl::StatusOr<std::unique_ptr<kd::Model>> MakeMyNet(const kd::Kwargs& kwargs);
//   KD_REGISTER(kd::ModelRegistry(), "my_net", MakeMyNet,
//               {{.name = "width", .type = kd::KwargType::kInteger, .doc = "channels; 16",
//                 .min = 1}});
//
// Errors: an unknown key is NotFound naming the nearest and every registered key; kwargs that
// break the registered contract are InvalidArgument naming each offending kwarg.
#ifndef LIBKD_DISTILL_MODELS_MODEL_REGISTRY_H_
#define LIBKD_DISTILL_MODELS_MODEL_REGISTRY_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/ivalue_util.h"
#include "base/registry.h"
#include "hooks/model.h"

namespace kd {

// Builds a model from kwargs that already passed the registration's KwargSpecs and check
// (absent kwargs take their documented defaults). Fresh parameters, in training mode, on the
// CPU.
using ModelFactory = std::function<absl::StatusOr<std::unique_ptr<Model>>(const Kwargs&)>;

// The global registry of native models, kind "model" (kd::kModelKind).
Registry<ModelFactory>& ModelRegistry();

// The model registered as `key`, built from `kwargs`: NotFound for an unknown key (naming the
// nearest and all registered keys); InvalidArgument naming every kwarg that breaks the
// registration's contract (unknown name, type, range, missing required) or its own check, or a
// libtorch error raised while building.
absl::StatusOr<std::unique_ptr<Model>> MakeRegisteredModel(absl::string_view key,
                                                           const Kwargs& kwargs = {});

}  // namespace kd

#endif  // LIBKD_DISTILL_MODELS_MODEL_REGISTRY_H_
