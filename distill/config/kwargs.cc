#include "distill/config/kwargs.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/core/jit_type.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/kwargs.h"
#include "base/nearest.h"
#include "base/status_macros.h"

namespace kd {
namespace {

// What a config value is, in the words of KwargTypeName.
KwargType ValueType(const Kwarg& kwarg) {
  switch (kwarg.value_case()) {
    case Kwarg::kNumber:
      return KwargType::kNumber;
    case Kwarg::kInteger:
      return KwargType::kInteger;
    case Kwarg::kBoolean:
      return KwargType::kBool;
    case Kwarg::kStr:
      return KwargType::kString;
    case Kwarg::kNumbers:
      return KwargType::kNumberList;
    case Kwarg::kIntegers:
      return KwargType::kIntegerList;
    case Kwarg::kStrs:
      return KwargType::kStringList;
    case Kwarg::kDict:
    case Kwarg::VALUE_NOT_SET:
      break;
  }
  return KwargType::kDict;
}

// Whether a value of type `actual` may fill a kwarg declared `wanted`.
bool Fits(KwargType actual, KwargType wanted) {
  if (wanted == KwargType::kAny || wanted == actual) return true;
  if (wanted == KwargType::kNumber) return actual == KwargType::kInteger;
  if (wanted == KwargType::kNumberList) return actual == KwargType::kIntegerList;
  return false;
}

const KwargSpec* FindSpec(const std::vector<KwargSpec>& specs, absl::string_view name) {
  for (const KwargSpec& spec : specs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

std::vector<std::string> SpecNames(const std::vector<KwargSpec>& specs) {
  std::vector<std::string> names;
  for (const KwargSpec& spec : specs) names.push_back(spec.name);
  return names;
}

// "a number", "an integer".
std::string WithArticle(KwargType type) {
  const absl::string_view name = KwargTypeName(type);
  const bool vowel = absl::string_view("aeiou").find(name[0]) != absl::string_view::npos;
  return absl::StrCat(vowel ? "an " : "a ", name);
}

std::string UnknownKwargMessage(absl::string_view name, const std::vector<KwargSpec>& specs,
                                absl::string_view owner) {
  const std::vector<std::string> names = SpecNames(specs);
  return absl::StrCat("unknown kwarg \"", name, "\" for ", owner, "; ", Suggest(name, names));
}

// Appends the structural problems of `kwargs` (names, duplicates, values), all reported at
// `index` when nested (index < 0: each entry's own index).
void CheckStructure(const KwargList& kwargs, absl::string_view owner, int index,
                    std::vector<KwargProblem>* problems) {
  std::set<std::string> seen;
  for (int i = 0; i < kwargs.size(); ++i) {
    const Kwarg& kwarg = kwargs[i];
    const int at = index < 0 ? i : index;
    if (kwarg.name().empty()) {
      problems->push_back({at, absl::StrCat("kwarg without a name for ", owner)});
      continue;
    }
    if (!seen.insert(kwarg.name()).second) {
      problems->push_back({at, absl::StrCat("duplicate kwarg \"", kwarg.name(), "\" for ", owner)});
    }
    if (kwarg.value_case() == Kwarg::VALUE_NOT_SET) {
      problems->push_back(
          {at, absl::StrCat("kwarg \"", kwarg.name(), "\" for ", owner, " has no value")});
    } else if (kwarg.has_dict()) {
      CheckStructure(kwarg.dict().kwargs(), absl::StrCat("dict \"", kwarg.name(), "\" of ", owner),
                     at, problems);
    }
  }
}

// The numbers of a number, integer or list value; the strings of a string or list value.
std::vector<double> Numbers(const Kwarg& kwarg) {
  switch (kwarg.value_case()) {
    case Kwarg::kNumber:
      return {kwarg.number()};
    case Kwarg::kInteger:
      return {static_cast<double>(kwarg.integer())};
    case Kwarg::kNumbers:
      return {kwarg.numbers().values().begin(), kwarg.numbers().values().end()};
    case Kwarg::kIntegers:
      return {kwarg.integers().values().begin(), kwarg.integers().values().end()};
    default:
      return {};
  }
}

std::vector<std::string> Strings(const Kwarg& kwarg) {
  if (kwarg.has_str()) return {kwarg.str()};
  if (kwarg.has_strs()) return {kwarg.strs().values().begin(), kwarg.strs().values().end()};
  return {};
}

// "(0, 1]", "[0, inf)": the range a spec allows.
std::string RangeText(const KwargSpec& spec) {
  return absl::StrCat(
      spec.min && spec.min_exclusive ? "(" : "[", spec.min ? absl::StrCat(*spec.min) : "-inf", ", ",
      spec.max ? absl::StrCat(*spec.max) : "inf", spec.max && spec.max_exclusive ? ")" : "]");
}

// What is wrong with the value of kwarg `name` (its numbers, its strings) under `spec` (its type
// already fits), or "".
std::string ValueProblem(absl::string_view name, const std::vector<double>& numbers,
                         const std::vector<std::string>& strings, const KwargSpec& spec,
                         absl::string_view owner) {
  const std::string what = absl::StrCat("kwarg \"", name, "\" for ", owner);
  for (double v : numbers) {
    if (!std::isfinite(v)) return absl::StrCat(what, " must be finite, got ", v);
    const bool below = spec.min && (spec.min_exclusive ? v <= *spec.min : v < *spec.min);
    const bool above = spec.max && (spec.max_exclusive ? v >= *spec.max : v > *spec.max);
    if (below || above) return absl::StrCat(what, " must be in ", RangeText(spec), ", got ", v);
  }
  if (!spec.choices.empty()) {
    for (const std::string& v : strings) {
      if (std::find(spec.choices.begin(), spec.choices.end(), v) == spec.choices.end()) {
        return absl::StrCat(what, " is \"", v, "\"; ", Suggest(v, spec.choices));
      }
    }
  }
  return "";
}

std::string TypeProblem(absl::string_view name, KwargType actual, const KwargSpec& spec,
                        absl::string_view owner) {
  return absl::StrCat("kwarg \"", name, "\" for ", owner, " must be ", WithArticle(spec.type),
                      ", not ", WithArticle(actual));
}

std::string MissingProblem(const KwargSpec& spec, absl::string_view owner) {
  return absl::StrCat("missing required kwarg \"", spec.name, "\" for ", owner,
                      spec.doc.empty() ? "" : " (", spec.doc, spec.doc.empty() ? "" : ")");
}

// What a programmatic value is, in the words of KwargTypeName (kAny: none of them).
KwargType ValueType(const c10::IValue& value) {
  if (value.isDouble()) return KwargType::kNumber;
  if (value.isInt()) return KwargType::kInteger;
  if (value.isBool()) return KwargType::kBool;
  if (value.isString()) return KwargType::kString;
  if (value.isDoubleList()) return KwargType::kNumberList;
  if (value.isIntList()) return KwargType::kIntegerList;
  if (value.isList() && value.type()->containedType(0)->kind() == c10::TypeKind::StringType) {
    return KwargType::kStringList;
  }
  if (value.isGenericDict()) return KwargType::kDict;
  return KwargType::kAny;
}

std::vector<double> Numbers(const c10::IValue& value) {
  if (value.isDouble()) return {value.toDouble()};
  if (value.isInt()) return {static_cast<double>(value.toInt())};
  if (value.isDoubleList()) return value.toDoubleVector();
  std::vector<double> out;
  if (value.isIntList()) {
    for (int64_t v : value.toIntVector()) out.push_back(static_cast<double>(v));
  }
  return out;
}

std::vector<std::string> Strings(const c10::IValue& value) {
  if (value.isString()) return {value.toStringRef()};
  std::vector<std::string> out;
  if (ValueType(value) == KwargType::kStringList) {
    for (const c10::IValue& v : value.toListRef()) out.push_back(v.toStringRef());
  }
  return out;
}

c10::IValue ToIValue(const Kwarg& kwarg, KwargType wanted);

c10::IValue DictToIValue(const KwargList& kwargs) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  for (const Kwarg& kwarg : kwargs) dict.insert(kwarg.name(), ToIValue(kwarg, KwargType::kAny));
  return dict;
}

template <typename T, typename Values>
c10::IValue ListToIValue(const Values& values) {
  c10::List<T> list;
  list.reserve(values.size());
  for (const auto& v : values) list.push_back(static_cast<T>(v));
  return list;
}

c10::IValue ToIValue(const Kwarg& kwarg, KwargType wanted) {
  switch (kwarg.value_case()) {
    case Kwarg::kNumber:
      return kwarg.number();
    case Kwarg::kInteger:
      if (wanted == KwargType::kNumber) return static_cast<double>(kwarg.integer());
      return kwarg.integer();
    case Kwarg::kBoolean:
      return kwarg.boolean();
    case Kwarg::kStr:
      return kwarg.str();
    case Kwarg::kNumbers:
      return ListToIValue<double>(kwarg.numbers().values());
    case Kwarg::kIntegers:
      if (wanted == KwargType::kNumberList) {
        return ListToIValue<double>(kwarg.integers().values());
      }
      return ListToIValue<int64_t>(kwarg.integers().values());
    case Kwarg::kStrs:
      return ListToIValue<std::string>(kwarg.strs().values());
    case Kwarg::kDict:
      return DictToIValue(kwarg.dict().kwargs());
    case Kwarg::VALUE_NOT_SET:
      break;
  }
  return c10::IValue();
}

// The plugin's own KwargsCheck, if it has one, on `filled` (the kwargs with their defaults), its
// message prefixed by `owner`. Runs outside the registry's lock: a check may look up plugins.
absl::Status RunOwnCheck(const RegistryBase& registry, absl::string_view key, const Kwargs& filled,
                         absl::string_view owner) {
  if (const KwargsCheck check = registry.GetKwargsCheck(key)) {
    if (absl::Status checked = check(KwargsView{filled}); !checked.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(owner, ": ", checked.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<KwargProblem> CheckKwargs(const KwargList& kwargs,
                                      const std::optional<std::vector<KwargSpec>>& specs,
                                      absl::string_view owner) {
  std::vector<KwargProblem> problems;
  CheckStructure(kwargs, owner, /*index=*/-1, &problems);
  // Every number finite, whatever the plugin declared.
  for (int i = 0; i < kwargs.size(); ++i) {
    for (double v : Numbers(kwargs[i])) {
      if (!std::isfinite(v)) {
        problems.push_back({i, absl::StrCat("kwarg \"", kwargs[i].name(), "\" for ", owner,
                                            " must be finite, got ", v)});
        break;
      }
    }
  }
  if (!specs.has_value()) return problems;
  for (int i = 0; i < kwargs.size(); ++i) {
    const Kwarg& kwarg = kwargs[i];
    if (kwarg.name().empty()) continue;
    const KwargSpec* spec = FindSpec(*specs, kwarg.name());
    if (spec == nullptr) {
      problems.push_back({i, UnknownKwargMessage(kwarg.name(), *specs, owner)});
    } else if (kwarg.value_case() == Kwarg::VALUE_NOT_SET) {
      // reported by CheckStructure
    } else if (!Fits(ValueType(kwarg), spec->type)) {
      problems.push_back({i, TypeProblem(kwarg.name(), ValueType(kwarg), *spec, owner)});
    } else if (std::string problem =
                   ValueProblem(kwarg.name(), Numbers(kwarg), Strings(kwarg), *spec, owner);
               !problem.empty() && !absl::StrContains(problem, " must be finite")) {
      problems.push_back({i, std::move(problem)});
    }
  }
  for (const KwargSpec& spec : *specs) {
    if (!spec.required) continue;
    const bool given = std::any_of(kwargs.begin(), kwargs.end(),
                                   [&](const Kwarg& k) { return k.name() == spec.name; });
    if (!given) problems.push_back({-1, MissingProblem(spec, owner)});
  }
  return problems;
}

absl::StatusOr<Kwargs> KwargsFromConfig(const KwargList& kwargs,
                                        const std::optional<std::vector<KwargSpec>>& specs,
                                        absl::string_view owner) {
  std::vector<KwargProblem> problems = CheckKwargs(kwargs, specs, owner);
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(
        problems, "; ", [](std::string* out, const KwargProblem& p) { out->append(p.message); }));
  }
  Kwargs result;
  for (const Kwarg& kwarg : kwargs) {
    const KwargSpec* spec = specs ? FindSpec(*specs, kwarg.name()) : nullptr;
    result.emplace(kwarg.name(), ToIValue(kwarg, spec ? spec->type : KwargType::kAny));
  }
  return result;
}

absl::StatusOr<Kwargs> PluginKwargs(const RegistryBase& registry, absl::string_view key,
                                    const KwargList& kwargs, absl::string_view owner) {
  KD_ASSIGN_OR_RETURN(Kwargs values, KwargsFromConfig(kwargs, registry.KwargSpecs(key), owner));
  KD_RETURN_IF_ERROR(RunOwnCheck(registry, key, WithPluginDefaults(registry, key, values), owner));
  return values;
}

absl::StatusOr<Kwargs> ResolvePluginKwargs(const RegistryBase& registry, absl::string_view key,
                                           const Kwargs& kwargs, absl::string_view owner) {
  const std::optional<std::vector<KwargSpec>> specs = registry.KwargSpecs(key);
  KD_RETURN_IF_ERROR(CheckKwargValues(kwargs, specs, owner));
  Kwargs filled = specs ? WithDefaults(kwargs, *specs) : kwargs;
  KD_RETURN_IF_ERROR(RunOwnCheck(registry, key, filled, owner));
  return filled;
}

Kwargs WithPluginDefaults(const RegistryBase& registry, absl::string_view key,
                          const Kwargs& kwargs) {
  const std::optional<std::vector<KwargSpec>> specs = registry.KwargSpecs(key);
  return specs ? WithDefaults(kwargs, *specs) : kwargs;
}

absl::Status CheckKwargValues(const Kwargs& kwargs,
                              const std::optional<std::vector<KwargSpec>>& specs,
                              absl::string_view owner) {
  std::vector<std::string> messages;
  for (const auto& [name, value] : kwargs) {
    const KwargSpec* spec = specs ? FindSpec(*specs, name) : nullptr;
    if (specs && spec == nullptr) {
      messages.push_back(UnknownKwargMessage(name, *specs, owner));
      continue;
    }
    if (spec != nullptr && !value.isNone() && !Fits(ValueType(value), spec->type)) {
      messages.push_back(TypeProblem(name, ValueType(value), *spec, owner));
      continue;
    }
    static const KwargSpec kAnything;
    if (std::string problem =
            ValueProblem(name, Numbers(value), Strings(value), spec ? *spec : kAnything, owner);
        !problem.empty()) {
      messages.push_back(std::move(problem));
    }
  }
  for (const KwargSpec& spec : specs.value_or(std::vector<KwargSpec>{})) {
    if (spec.required && kwargs.count(spec.name) == 0) {
      messages.push_back(MissingProblem(spec, owner));
    }
  }
  if (messages.empty()) return absl::OkStatus();
  std::sort(messages.begin(), messages.end());  // kwargs is unordered
  return absl::InvalidArgumentError(absl::StrJoin(messages, "; "));
}

}  // namespace kd
