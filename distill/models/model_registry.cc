#include "distill/models/model_registry.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "distill/config/kwargs.h"
#include "distill/config/plugin_kinds.h"

namespace kd {

Registry<ModelFactory>& ModelRegistry() {
  static Registry<ModelFactory>* const registry =
      NewGlobalRegistry<ModelFactory>(std::string(kModelKind));
  return *registry;
}

absl::StatusOr<std::unique_ptr<Model>> MakeRegisteredModel(absl::string_view key,
                                                           const Kwargs& kwargs) {
  Registry<ModelFactory>& registry = ModelRegistry();
  KD_ASSIGN_OR_RETURN(const ModelFactory* factory, registry.Get(key));
  const std::string owner = absl::StrCat(kModelKind, " \"", key, "\"");
  KD_ASSIGN_OR_RETURN(const Kwargs resolved, ResolvePluginKwargs(registry, key, kwargs, owner));
  absl::StatusOr<absl::StatusOr<std::unique_ptr<Model>>> model =
      CallTorch([&] { return (*factory)(resolved); }, absl::StatusCode::kInvalidArgument);
  if (!model.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("building ", owner, ": ", model.status().message()));
  }
  return *std::move(model);
}

}  // namespace kd
