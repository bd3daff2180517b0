#include "base/kwargs.h"

#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "c10/util/Exception.h"

namespace kd {
namespace {

// The value of a default as the spec's type wants it.
c10::IValue AsSpecType(const c10::IValue& value, KwargType type) {
  if (type == KwargType::kNumber && value.isInt()) {
    return static_cast<double>(value.toInt());
  }
  if (type == KwargType::kNumberList && value.isIntList()) {
    std::vector<double> numbers;
    for (int64_t v : value.toIntVector()) numbers.push_back(static_cast<double>(v));
    return numbers;
  }
  return value;
}

const c10::IValue& Get(const Kwargs& kwargs, absl::string_view name) {
  const c10::IValue* value = FindKwarg(kwargs, name);
  TORCH_CHECK(value != nullptr, "kwarg \"", std::string(name),
              "\" is read but neither given nor defaulted: give its KwargSpec a default_value, "
              "make it required, or read it with kd::FindKwarg");
  return *value;
}

}  // namespace

Kwargs MergeKwargs(const Kwargs& defaults, const Kwargs& overrides) {
  Kwargs merged = defaults;
  for (const auto& [name, value] : overrides) merged.insert_or_assign(name, value);
  return merged;
}

absl::string_view KwargTypeName(KwargType type) {
  switch (type) {
    case KwargType::kAny:
      return "any value";
    case KwargType::kNumber:
      return "number";
    case KwargType::kInteger:
      return "integer";
    case KwargType::kBool:
      return "bool";
    case KwargType::kString:
      return "string";
    case KwargType::kNumberList:
      return "list of numbers";
    case KwargType::kIntegerList:
      return "list of integers";
    case KwargType::kStringList:
      return "list of strings";
    case KwargType::kDict:
      return "dict";
  }
  return "unknown type";
}

KwargSpec PositiveNumberSpec(std::string name, std::string doc, double default_value) {
  return {.name = std::move(name),
          .type = KwargType::kNumber,
          .doc = std::move(doc),
          .default_value = default_value,
          .min = 0,
          .min_exclusive = true};
}

KwargSpec NonNegativeNumberSpec(std::string name, std::string doc, double default_value) {
  return {.name = std::move(name),
          .type = KwargType::kNumber,
          .doc = std::move(doc),
          .default_value = default_value,
          .min = 0};
}

Kwargs WithDefaults(const Kwargs& kwargs, const std::vector<KwargSpec>& specs) {
  Kwargs filled = kwargs;
  for (const KwargSpec& spec : specs) {
    if (spec.default_value.isNone() || FindKwarg(kwargs, spec.name) != nullptr) continue;
    filled.insert_or_assign(spec.name, AsSpecType(spec.default_value, spec.type));
  }
  return filled;
}

std::string DefaultText(const KwargSpec& spec) {
  if (spec.default_value.isNone()) return "";
  const c10::IValue value = AsSpecType(spec.default_value, spec.type);
  if (value.isString()) return absl::StrCat("\"", value.toStringRef(), "\"");
  if (value.isBool()) return value.toBool() ? "true" : "false";
  std::ostringstream out;
  out << value;  // numbers and lists as Python prints them: 4., [0.9, 0.999]
  return out.str();
}

const c10::IValue* FindKwarg(const Kwargs& kwargs, absl::string_view name) {
  auto it = kwargs.find(std::string(name));
  return it == kwargs.end() || it->second.isNone() ? nullptr : &it->second;
}

double NumberKwarg(const Kwargs& kwargs, absl::string_view name) {
  const c10::IValue& value = Get(kwargs, name);
  return value.isInt() ? static_cast<double>(value.toInt()) : value.toDouble();
}

int64_t IntKwarg(const Kwargs& kwargs, absl::string_view name) { return Get(kwargs, name).toInt(); }

bool BoolKwarg(const Kwargs& kwargs, absl::string_view name) { return Get(kwargs, name).toBool(); }

std::string StringKwarg(const Kwargs& kwargs, absl::string_view name) {
  return Get(kwargs, name).toStringRef();
}

std::vector<double> NumberListKwarg(const Kwargs& kwargs, absl::string_view name) {
  const c10::IValue& value = Get(kwargs, name);
  if (!value.isIntList()) return value.toDoubleVector();
  std::vector<double> numbers;
  for (int64_t v : value.toIntVector()) numbers.push_back(static_cast<double>(v));
  return numbers;
}

std::vector<int64_t> IntListKwarg(const Kwargs& kwargs, absl::string_view name) {
  return Get(kwargs, name).toIntVector();
}

std::vector<std::string> StringListKwarg(const Kwargs& kwargs, absl::string_view name) {
  std::vector<std::string> strings;
  for (const c10::IValue& v : Get(kwargs, name).toListRef()) strings.push_back(v.toStringRef());
  return strings;
}

}  // namespace kd
