#include "distill/config/kwargs.h"

#include <algorithm>
#include <set>
#include <utility>

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/core/jit_type.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "distill/config/internal/suggest.h"

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
  std::string suggestion = internal::DidYouMean(name, names);
  if (suggestion.empty()) suggestion = internal::ValidNames("it takes", names);
  return absl::StrCat("unknown kwarg \"", name, "\" for ", owner, suggestion);
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

}  // namespace

std::vector<KwargProblem> CheckKwargs(const KwargList& kwargs,
                                      const std::optional<std::vector<KwargSpec>>& specs,
                                      absl::string_view owner) {
  std::vector<KwargProblem> problems;
  CheckStructure(kwargs, owner, /*index=*/-1, &problems);
  if (!specs.has_value()) return problems;
  for (int i = 0; i < kwargs.size(); ++i) {
    const Kwarg& kwarg = kwargs[i];
    if (kwarg.name().empty()) continue;
    const KwargSpec* spec = FindSpec(*specs, kwarg.name());
    if (spec == nullptr) {
      problems.push_back({i, UnknownKwargMessage(kwarg.name(), *specs, owner)});
    } else if (kwarg.value_case() != Kwarg::VALUE_NOT_SET && !Fits(ValueType(kwarg), spec->type)) {
      problems.push_back(
          {i, absl::StrCat("kwarg \"", kwarg.name(), "\" for ", owner, " must be ",
                           WithArticle(spec->type), ", not ", WithArticle(ValueType(kwarg)))});
    }
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

absl::Status CheckKwargNames(const Kwargs& kwargs,
                             const std::optional<std::vector<KwargSpec>>& specs,
                             absl::string_view owner) {
  if (!specs.has_value()) return absl::OkStatus();
  std::vector<std::string> messages;
  for (const auto& [name, value] : kwargs) {
    if (FindSpec(*specs, name) == nullptr) {
      messages.push_back(UnknownKwargMessage(name, *specs, owner));
    }
  }
  if (messages.empty()) return absl::OkStatus();
  std::sort(messages.begin(), messages.end());  // kwargs is unordered
  return absl::InvalidArgumentError(absl::StrJoin(messages, "; "));
}

}  // namespace kd
