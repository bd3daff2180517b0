// The kwargs vocabulary: keyword arguments as values (kd::Kwargs), the contract a plugin
// declares for them (kd::KwargSpec, defaults included), and how a plugin's factory reads them.
//
//   // The contract, given to KD_REGISTER (base/registry.h): the default is written once, here.
//   {.name = "temperature", .type = kd::KwargType::kNumber, .doc = "softmax temperature",
//    .default_value = 4.0, .min = 0, .min_exclusive = true}
//
//   // The factory: its maker has checked the kwargs and filled every default in
//   // (kd::ResolvePluginKwargs, distill/config/kwargs.h), so it reads without fallbacks.
//   const double t = kd::NumberKwarg(kwargs, "temperature");
//   if (const c10::IValue* weight = kd::FindKwarg(kwargs, "weight")) ...  // optional, no default
//
// Config text becomes Kwargs in distill/config/kwargs.h; everything else about kwargs is here.
#ifndef LIBKD_BASE_KWARGS_H_
#define LIBKD_BASE_KWARGS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/core/ivalue.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kd {

// Keyword arguments of a forward or a plugin, as in torch::jit::Kwargs.
using Kwargs = std::unordered_map<std::string, c10::IValue>;

// `defaults` with `overrides` on top (a config's kwargs over a call's, a group's over the
// optimizer's).
Kwargs MergeKwargs(const Kwargs& defaults, const Kwargs& overrides);

// The type a keyword argument of a plugin must have in a config.
enum class KwargType {
  kAny,          // anything
  kNumber,       // a number (an integer is accepted and converted)
  kInteger,      // an integer
  kBool,         // true / false
  kString,       // a string
  kNumberList,   // a list of numbers (integers accepted)
  kIntegerList,  // a list of integers
  kStringList,   // a list of strings
  kDict,         // nested keyword arguments
};

// "number", "integer", ...: the name used in messages.
absl::string_view KwargTypeName(KwargType type);

// One keyword argument a plugin accepts: its contract, checked by config validation before
// anything runs (with the file, line and column of the offending value).
//
//   {.name = "temperature", .type = KwargType::kNumber, .doc = "softmax temperature",
//    .default_value = 4.0, .min = 0, .min_exclusive = true}
//   {.name = "reduction", .type = KwargType::kString, .default_value = "mean",
//    .choices = {"mean", "sum", "none"}}
struct KwargSpec {
  std::string name;
  KwargType type = KwargType::kAny;
  std::string doc;  // one line: meaning, unit (the default is default_value, not written here)
  // The value a factory reads when the kwarg is not given (or given as None); None: no
  // default (a required kwarg, or an optional one whose absence means something: FindKwarg).
  // Checked against this spec by kwargs_test for every registered plugin.
  c10::IValue default_value;
  // Bounds of a number or integer (of each element of a list); unset: unbounded. Every
  // number in a config must be finite, bounded or not.
  std::optional<double> min;
  std::optional<double> max;
  bool min_exclusive = false;  // min < value instead of min <= value
  bool max_exclusive = false;
  // The values a string (or each string of a list) may take; empty: any.
  std::vector<std::string> choices;
  // Whether a config must give it.
  bool required = false;
};

// The commonest specs: a number > 0 (a temperature) or >= 0 (a weight), with its default.
KwargSpec PositiveNumberSpec(std::string name, std::string doc, double default_value);
KwargSpec NonNegativeNumberSpec(std::string name, std::string doc, double default_value);

// `kwargs` with the default of every spec it does not give (or gives as None) filled in,
// converted to the spec's type (an integer default of a number kwarg becomes a double).
Kwargs WithDefaults(const Kwargs& kwargs, const std::vector<KwargSpec>& specs);

// "4", "\"mean\"", "[0.9, 0.999]": a default as messages and manuals print it; "" for none.
std::string DefaultText(const KwargSpec& spec);

// The kwargs a plugin's KwargsCheck sees: checked against every KwargSpec, defaults filled.
struct KwargsView {
  const Kwargs& kwargs;
};

// A plugin's own check of its kwargs as a whole (relations between them: "alpha + beta <= 1"),
// run after every KwargSpec check has passed. InvalidArgument with a message naming the
// kwargs; OK otherwise.
using KwargsCheck = std::function<absl::Status(const KwargsView& view)>;

// Reading kwargs in a factory (or a KwargsCheck), after the maker has checked them and filled
// the defaults: the spec guarantees the type, so these convert only where the contract does
// (an integer where a number is expected). Reading a kwarg that is neither given nor defaulted
// is a bug in the plugin's spec: c10::Error naming the kwarg.
const c10::IValue* FindKwarg(const Kwargs& kwargs, absl::string_view name);  // null: absent/None
double NumberKwarg(const Kwargs& kwargs, absl::string_view name);
int64_t IntKwarg(const Kwargs& kwargs, absl::string_view name);
bool BoolKwarg(const Kwargs& kwargs, absl::string_view name);
std::string StringKwarg(const Kwargs& kwargs, absl::string_view name);
std::vector<double> NumberListKwarg(const Kwargs& kwargs, absl::string_view name);
std::vector<int64_t> IntListKwarg(const Kwargs& kwargs, absl::string_view name);
std::vector<std::string> StringListKwarg(const Kwargs& kwargs, absl::string_view name);

}  // namespace kd

#endif  // LIBKD_BASE_KWARGS_H_
