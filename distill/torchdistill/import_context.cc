#include "distill/torchdistill/import_context.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/kwargs.h"
#include "base/registry.h"
#include "base/status_macros.h"

namespace kd {
namespace torchdistill {

using Kind = YamlValue::Kind;

absl::Status Context::WrongType(const YamlValue& v, const std::string& what,
                                const std::string& expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(v.Where(), ": ", what, " must be ", expected, ", not ", v.Describe(),
                   v.is_scalar() && v.kind != Kind::kNull ? absl::StrCat(" '", v.text, "'") : ""));
}

std::string ResolveNegativeIndices(const std::string& path,
                                   const std::vector<std::string>& module_paths) {
  if (module_paths.empty() || (path.find(".-") == std::string::npos && !path.starts_with("-"))) {
    return path;
  }
  std::string resolved;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    int64_t index = 0;
    if (absl::StartsWith(part, "-") && absl::SimpleAtoi(part, &index) && index < 0) {
      std::vector<absl::string_view> children;  // the direct children of `resolved`
      const std::string prefix = resolved.empty() ? "" : resolved + ".";
      for (const std::string& m : module_paths) {
        absl::string_view rest(m);
        if (m.empty() || !absl::ConsumePrefix(&rest, prefix) || rest.empty() ||
            absl::StrContains(rest, '.')) {
          continue;
        }
        children.push_back(rest);
      }
      if (static_cast<int64_t>(children.size()) >= -index) {
        part = children[children.size() + index];
      }
    }
    absl::StrAppend(&resolved, resolved.empty() ? "" : ".", part);
  }
  return resolved;
}

void Context::UnsupportedPlugin(const YamlValue& at, const std::string& what,
                                const std::string& kind, const std::string& key,
                                const std::string& present, const std::string& absent) {
  const RegistryBase* registry = FindRegistry(kind);
  if (registry != nullptr && registry->Contains(key)) {
    Unsupported(at, what, present);
  } else {
    Unsupported(at, what,
                absl::StrCat(absent, registry != nullptr ? registry->CheckKey(key).message()
                                                         : "no " + kind + " registry linked"));
  }
}

absl::StatusOr<int64_t> Context::Int(const YamlValue& v, const std::string& what, int64_t min,
                                     int64_t max) {
  if (v.kind != Kind::kInt) return WrongType(v, what, "an integer");
  if (v.integer < min || v.integer > max) {
    return absl::InvalidArgumentError(absl::StrCat(v.Where(), ": ", what, " ", v.text,
                                                   " is out of range: libkd takes ", min, " to ",
                                                   max));
  }
  return v.integer;
}

absl::StatusOr<double> Context::Number(const YamlValue& v, const std::string& what) {
  if (v.kind == Kind::kInt) return static_cast<double>(v.integer);
  if (v.kind != Kind::kFloat) {
    return WrongType(v, what,
                     v.kind == Kind::kString && v.text.find_first_of("eE") != std::string::npos
                         ? "a number (YAML 1.1, as PyYAML reads it, takes 1e-5 for a string: "
                           "write 1.0e-5)"
                         : "a number");
  }
  return v.number;
}

absl::StatusOr<bool> Context::Bool(const YamlValue& v, const std::string& what) {
  if (v.kind != Kind::kBool) return WrongType(v, what, "true or false");
  return v.boolean;
}

absl::StatusOr<std::string> Context::String(const YamlValue& v, const std::string& what) {
  if (v.kind != Kind::kString) return WrongType(v, what, "a string");
  return v.text;
}

absl::StatusOr<std::vector<std::string>> Context::Strings(const YamlValue& v,
                                                          const std::string& what) {
  std::vector<std::string> out;
  if (v.kind == Kind::kNull) return out;
  if (v.kind != Kind::kList) return WrongType(v, what, "a list of strings");
  for (const auto& item : v.items) {
    if (item->kind != Kind::kString) return WrongType(*item, what + " items", "strings");
    out.push_back(item->text);
  }
  return out;
}

absl::StatusOr<bool> Context::ToKwarg(const YamlValue& v, const std::string& name,
                                      const std::string& what, Kwarg* out) {
  out->set_name(name);
  switch (v.kind) {
    case Kind::kBool:
      out->set_boolean(v.boolean);
      return true;
    case Kind::kInt:
      out->set_integer(v.integer);
      return true;
    case Kind::kFloat:
      out->set_number(v.number);
      return true;
    case Kind::kString:
      out->set_str(v.text);
      return true;
    case Kind::kNull:
      return false;
    case Kind::kCall:
      Unsupported(v, absl::StrCat(what, " ", v.tag),
                  "a Python object has no libkd config form; give the value it stands for");
      return false;
    case Kind::kMap: {
      for (const auto& [key, value] : v.entries) {
        Kwarg inner;
        KD_ASSIGN_OR_RETURN(bool given, ToKwarg(*value, key, what + "." + key, &inner));
        if (given) *out->mutable_dict()->add_kwargs() = std::move(inner);
      }
      if (!out->has_dict()) out->mutable_dict();
      return true;
    }
    case Kind::kList: {
      bool ints = true, numbers = true, strings = true;
      for (const auto& item : v.items) {
        ints &= item->kind == Kind::kInt;
        numbers &= item->kind == Kind::kInt || item->kind == Kind::kFloat;
        strings &= item->kind == Kind::kString;
      }
      if (ints) {
        for (const auto& item : v.items) out->mutable_integers()->add_values(item->integer);
        if (v.items.empty()) out->mutable_integers();
      } else if (numbers) {
        for (const auto& item : v.items) {
          out->mutable_numbers()->add_values(
              item->kind == Kind::kInt ? static_cast<double>(item->integer) : item->number);
        }
      } else if (strings) {
        for (const auto& item : v.items) out->mutable_strs()->add_values(item->text);
      } else {
        Unsupported(v, what, "a list of mixed values has no libkd kwarg form");
        return false;
      }
      return true;
    }
  }
  return false;
}

absl::Status Context::Kwargs(const YamlValue* map, const std::string& kind, const std::string& key,
                             const std::string& what,
                             google::protobuf::RepeatedPtrField<Kwarg>* out) {
  if (map == nullptr || map->kind == Kind::kNull) return absl::OkStatus();
  if (map->kind != Kind::kMap) return WrongType(*map, what, "a mapping of keyword arguments");
  const RegistryBase* registry = FindRegistry(kind);
  std::optional<std::vector<KwargSpec>> specs;
  if (registry != nullptr) specs = registry->KwargSpecs(key);
  for (const auto& [name, value] : map->entries) {
    if (name.starts_with("_")) continue;
    const KwargSpec* spec = nullptr;
    if (specs.has_value()) {
      for (const KwargSpec& s : *specs) {
        if (s.name == name) spec = &s;
      }
      if (spec == nullptr) {
        std::vector<std::string> names;
        for (const KwargSpec& s : *specs) names.push_back(s.name);
        Unsupported(*value, absl::StrCat(what, ".", name),
                    absl::StrCat("libkd's ", kind, " \"", key, "\" takes ",
                                 names.empty() ? "no kwargs" : absl::StrJoin(names, ", ")));
        continue;
      }
    }
    Kwarg kwarg;
    absl::StatusOr<bool> given = ToKwarg(*value, name, absl::StrCat(what, ".", name), &kwarg);
    if (!given.ok()) return given.status();
    if (!*given) continue;
    if (spec != nullptr && spec->type == KwargType::kNumber && kwarg.has_integer()) {
      kwarg.set_number(static_cast<double>(kwarg.integer()));
    }
    if (spec != nullptr && spec->type == KwargType::kNumberList && kwarg.has_integers()) {
      NumberList numbers;
      for (int64_t i : kwarg.integers().values()) numbers.add_values(static_cast<double>(i));
      *kwarg.mutable_numbers() = numbers;
    }
    *out->Add() = std::move(kwarg);
  }
  return absl::OkStatus();
}

absl::StatusOr<Keys> Keys::Of(const YamlValue* map, const std::string& what) {
  const bool entries = map != nullptr && (map->kind == Kind::kMap ||
                                          (map->kind == Kind::kCall && map->items.empty()));
  if (map != nullptr && !entries && map->kind != Kind::kNull) {
    return Context::WrongType(*map, what, "a mapping");
  }
  Keys keys;
  keys.map_ = entries ? map : nullptr;
  keys.what_ = what;
  if (keys.map_ != nullptr) {
    for (const auto& [key, value] : keys.map_->entries) keys.index_.emplace(key, value.get());
  }
  return keys;
}

const YamlValue* Keys::Take(const std::string& key) {
  taken_.insert(key);
  const auto it = index_.find(key);
  return it == index_.end() ? nullptr : it->second;
}

const YamlValue* Keys::TakeOr(Context& context, const std::string& key,
                              const std::string& old_key) {
  const YamlValue* v = Take(key);
  const YamlValue* old = Take(old_key);
  if (v != nullptr || old == nullptr) return v;
  context.Note(*old, absl::StrCat(what_, ".", old_key),
               absl::StrCat("torchdistill 0.x's name, taken as 1.x's ", key));
  return old;
}

void Keys::Finish(Context& context, const std::string& why) {
  if (map_ == nullptr) return;
  for (const auto& [key, value] : map_->entries) {
    if (taken_.contains(key) || key.starts_with("_")) continue;
    context.Unsupported(*value, absl::StrCat(what_, ".", key), why);
  }
}

}  // namespace torchdistill
}  // namespace kd
