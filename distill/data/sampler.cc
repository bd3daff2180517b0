#include "distill/data/sampler.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "distill/config/kwargs.h"
#include "distill/config/plugin_kinds.h"

namespace kd {

Registry<SamplerFactory>& SamplerRegistry() {
  static Registry<SamplerFactory>* const registry =
      NewGlobalRegistry<SamplerFactory>(std::string(kSamplerKind));
  return *registry;
}

absl::StatusOr<std::shared_ptr<const Sampler>> MakeSampler(absl::string_view key,
                                                           const Kwargs& kwargs) {
  Registry<SamplerFactory>& registry = SamplerRegistry();
  KD_ASSIGN_OR_RETURN(const SamplerFactory* factory, registry.Get(key));
  KD_ASSIGN_OR_RETURN(
      const Kwargs resolved,
      ResolvePluginKwargs(registry, key, kwargs, absl::StrCat(kSamplerKind, " \"", key, "\"")));
  return (*factory)(resolved);
}

}  // namespace kd
