#include "distill/config/internal/checker.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "base/device.h"
#include "base/file_util.h"

namespace kd {
namespace config_internal {

std::vector<ConfigProblem> Checker::TakeProblems() {
  std::stable_sort(problems_.begin(), problems_.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.at.line, a.at.column) < std::make_pair(b.at.line, b.at.column);
  });
  return std::move(problems_);
}

void Checker::Add(TextPosition at, std::string message) {
  problems_.push_back({loaded_.file, at, std::move(message)});
}

void Checker::Warn(TextPosition at, std::string message) {
  problems_.push_back({loaded_.file, at, std::move(message), ConfigProblem::Severity::kWarning});
}

void Checker::Missing(const ConfigLocator& loc, absl::string_view field, absl::string_view hint) {
  Add(loc.self(),
      absl::StrCat("missing required field \"", field, "\" in ", loc.type_name(), hint));
}

void Checker::RequiredPositive(const ConfigLocator& loc, absl::string_view field, int64_t value) {
  if (!loc.Written(field)) {
    Missing(loc, field);
  } else {
    AtLeast<int64_t>(loc, field, value, 1);
  }
}

void Checker::CheckPlugin(absl::string_view kind, const std::string& key, const KwargList& kwargs,
                          const ConfigLocator& loc) {
  if (key.empty()) {
    Missing(loc, "key");
    CheckKwargList(kwargs, std::nullopt, absl::StrCat(kind, " (no key)"), loc, "kwargs");
    return;
  }
  const RegistryBase* registry = FindRegistry(kind);
  std::optional<std::vector<KwargSpec>> specs;
  const bool known = registry != nullptr && registry->Contains(key);
  if (registry != nullptr && !known) {
    Add(loc.Of("key"), std::string(registry->CheckKey(key).message()));
  } else if (known) {
    specs = registry->KwargSpecs(key);
  }
  const std::string owner = absl::StrCat(kind, " \"", key, "\"");
  if (CheckKwargList(kwargs, specs, owner, loc, "kwargs") && known) {
    // The plugin's contract: its own check of the kwargs as a whole.
    absl::StatusOr<Kwargs> checked = PluginKwargs(*registry, key, kwargs, owner);
    if (!checked.ok()) Add(loc.Of("key"), std::string(checked.status().message()));
  }
}

bool Checker::CheckKwargList(const KwargList& kwargs,
                             const std::optional<std::vector<KwargSpec>>& specs,
                             absl::string_view owner, const ConfigLocator& loc,
                             absl::string_view field) {
  const std::vector<KwargProblem> problems = CheckKwargs(kwargs, specs, owner);
  for (const KwargProblem& problem : problems) {
    if (problem.index < 0) {
      Add(loc.self(), problem.message);
      continue;
    }
    const ConfigLocator kwarg = loc.Nested(field, problem.index);
    Add(kwarg.Written("name") ? kwarg.Of("name") : kwarg.self(), problem.message);
  }
  return problems.empty();
}

void Checker::CheckFile(const std::string& path, const ConfigLocator& loc,
                        absl::string_view field) {
  if (!check_files_ || path.empty()) return;
  const std::string resolved = ResolveUserPath(path);
  if (::access(resolved.c_str(), R_OK) != 0) {
    Add(loc.Of(field), absl::StrCat("cannot read ", field, " \"", path, "\"",
                                    resolved == path ? "" : absl::StrCat(" (", resolved, ")")));
  }
}

namespace {

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or values past U+10FFFF).
bool IsUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i <= static_cast<size_t>(n)) return false;
    for (int k = 1; k <= n; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

}  // namespace

void Checker::CheckFieldValues(const google::protobuf::Message& message, const ConfigLocator& loc,
                               bool in_kwargs) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* reflection = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    const int n = field->is_repeated() ? reflection->FieldSize(message, field) : 1;
    for (int i = 0; i < n; ++i) {
      const int index = field->is_repeated() ? i : -1;
      switch (field->cpp_type()) {
        case FieldDescriptor::CPPTYPE_DOUBLE: {
          if (in_kwargs) break;  // CheckKwargList words these with the kwarg's name
          const double v = field->is_repeated() ? reflection->GetRepeatedDouble(message, field, i)
                                                : reflection->GetDouble(message, field);
          if (!std::isfinite(v)) {
            Add(loc.Of(field->name(), index),
                absl::StrCat(field->name(), " must be finite, got ", v));
          }
          break;
        }
        case FieldDescriptor::CPPTYPE_STRING: {
          std::string scratch;
          const std::string& v =
              field->is_repeated()
                  ? reflection->GetRepeatedStringReference(message, field, i, &scratch)
                  : reflection->GetStringReference(message, field, &scratch);
          if (!IsUtf8(v)) {
            Add(loc.Of(field->name(), index),
                absl::StrCat(field->name(),
                             " is not valid UTF-8 text; write the config in UTF-8 (non-ASCII "
                             "bytes may also be written as \\ooo octal escapes of UTF-8)"));
          } else if (v.find('\0') != std::string::npos) {
            // A path cut at its NUL by the system would name another file ("a.txt\0.pt"
            // writes a.txt): no config string holds one.
            Add(loc.Of(field->name(), index),
                absl::StrCat(field->name(), " holds a NUL byte (\\000); no config value may: "
                                            "remove it"));
          }
          break;
        }
        case FieldDescriptor::CPPTYPE_ENUM: {
          // proto3 enums are open: the parser takes any number, the run would not.
          const int v = field->is_repeated() ? reflection->GetRepeatedEnumValue(message, field, i)
                                             : reflection->GetEnumValue(message, field);
          if (field->enum_type()->FindValueByNumber(v) == nullptr) {
            std::vector<std::string> names;
            for (int k = 0; k < field->enum_type()->value_count(); ++k) {
              names.push_back(field->enum_type()->value(k)->name());
            }
            Add(loc.Of(field->name(), index),
                absl::StrCat(field->name(), ": ", v, " is not a value of ",
                             field->enum_type()->name(), "; use one of ",
                             absl::StrJoin(names, ", ")));
          }
          break;
        }
        case FieldDescriptor::CPPTYPE_MESSAGE: {
          const google::protobuf::Message& nested =
              field->is_repeated() ? reflection->GetRepeatedMessage(message, field, i)
                                   : reflection->GetMessage(message, field);
          CheckFieldValues(nested, loc.Nested(field->name(), index),
                           in_kwargs || field->message_type() == Kwarg::descriptor());
          break;
        }
        default:
          break;
      }
    }
  }
}

void Checker::CheckDevice(const std::string& device, const ConfigLocator& loc,
                          absl::string_view field) {
  if (device.empty()) return;
  if (absl::Status parsed = ParseDeviceName(device).status(); !parsed.ok()) {
    Add(loc.Of(field), std::string(parsed.message()));
  }
}

}  // namespace config_internal
}  // namespace kd
