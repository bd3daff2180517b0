// Keyword arguments written in configs (kd.Kwarg, distill/config/plugin_config.proto) as IValues,
// checked against the kwargs a plugin declared when it registered (the vocabulary: Kwargs,
// KwargSpec and the readers, is base/kwargs.h).
//
//   KD_ASSIGN_OR_RETURN(kd::Kwargs kwargs,
//                       kd::KwargsFromConfig(config.kwargs(), registry.KwargSpecs(key),
//                                            "loss \"KDLoss\""));
//   double t = kd::NumberKwarg(kwargs, "temperature");
//
// Values: number -> double, integer -> int (double where the spec says number), boolean ->
// bool, str -> string, numbers / integers / strs -> List[float] / List[int] / List[str],
// dict -> Dict[str, Any].
#ifndef LIBKD_DISTILL_CONFIG_KWARGS_H_
#define LIBKD_DISTILL_CONFIG_KWARGS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/kwargs.h"
#include "base/registry.h"
#include "distill/config/plugin_config.pb.h"
#include "google/protobuf/repeated_ptr_field.h"

namespace kd {

using KwargList = google::protobuf::RepeatedPtrField<Kwarg>;

// A problem with one kwarg of a config: its index in the list and what is wrong.
struct KwargProblem {
  int index = 0;
  std::string message;
};

// Every problem of `kwargs`: unnamed, duplicate or valueless entries (nested dicts too),
// numbers that are not finite, and, when `specs` is given, unknown names (with the nearest),
// values of the wrong type, out of their range or not among their choices, and missing
// required kwargs (index -1: the list itself).
// `owner` names the plugin in messages: `loss "KDLoss"`.
std::vector<KwargProblem> CheckKwargs(const KwargList& kwargs,
                                      const std::optional<std::vector<KwargSpec>>& specs,
                                      absl::string_view owner);

// The kwargs as IValues; InvalidArgument listing every problem CheckKwargs finds.
absl::StatusOr<Kwargs> KwargsFromConfig(const KwargList& kwargs,
                                        const std::optional<std::vector<KwargSpec>>& specs,
                                        absl::string_view owner);

// The kwargs of the plugin registered as `key` in `registry`, from a config: KwargsFromConfig
// with the plugin's specs, then the plugin's own KwargsCheck (its message prefixed by `owner`).
// Defaults are not filled in (a group's kwargs merge over its optimizer's first): the maker
// does that (ResolvePluginKwargs).
absl::StatusOr<Kwargs> PluginKwargs(const RegistryBase& registry, absl::string_view key,
                                    const KwargList& kwargs, absl::string_view owner);

// The kwargs a plugin's factory gets: `kwargs` (built in code, or PluginKwargs' after merging)
// checked by CheckKwargValues against the specs of `key` in `registry` and by its own
// KwargsCheck (the message prefixed by `owner`, e.g. `loss "KDLoss"`), with every default of
// its specs filled in (kd::WithDefaults). Every plugin maker calls this before the factory.
absl::StatusOr<Kwargs> ResolvePluginKwargs(const RegistryBase& registry, absl::string_view key,
                                           const Kwargs& kwargs, absl::string_view owner);

// `kwargs` (checked already, e.g. by PluginKwargs) with the defaults of the specs of `key` in
// `registry` filled in: what its factory reads.
Kwargs WithPluginDefaults(const RegistryBase& registry, absl::string_view key,
                          const Kwargs& kwargs);

// The checks of CheckKwargs on kwargs built in code (MakeLoss, BuildProcFunc callers): unknown
// names, types, non-finite numbers, ranges, choices and missing required kwargs; one
// InvalidArgument listing every problem.
absl::Status CheckKwargValues(const Kwargs& kwargs,
                              const std::optional<std::vector<KwargSpec>>& specs,
                              absl::string_view owner);

}  // namespace kd

#endif  // LIBKD_DISTILL_CONFIG_KWARGS_H_
