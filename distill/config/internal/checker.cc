#include "distill/config/internal/checker.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/device.h"
#include "base/file_util.h"

namespace kd {
namespace internal {

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

bool Checker::CheckKwargList(const KwargList& kwargs, const std::optional<std::vector<KwargSpec>>& specs,
                    absl::string_view owner, const ConfigLocator& loc, absl::string_view field) {
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

void Checker::CheckFile(const std::string& path, const ConfigLocator& loc, absl::string_view field) {
  if (!check_files_ || path.empty()) return;
  const std::string resolved = ResolveUserPath(path);
  if (::access(resolved.c_str(), R_OK) != 0) {
    Add(loc.Of(field), absl::StrCat("cannot read ", field, " \"", path, "\"",
                                    resolved == path ? "" : absl::StrCat(" (", resolved, ")")));
  }
}

void Checker::CheckFiniteNumbers(const google::protobuf::Message& message,
                                 const ConfigLocator& loc) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* reflection = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    const int n = field->is_repeated() ? reflection->FieldSize(message, field) : 1;
    for (int i = 0; i < n; ++i) {
      const int index = field->is_repeated() ? i : -1;
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
        const double v = field->is_repeated() ? reflection->GetRepeatedDouble(message, field, i)
                                              : reflection->GetDouble(message, field);
        if (!std::isfinite(v)) {
          Add(loc.Of(field->name(), index),
              absl::StrCat(field->name(), " must be finite, got ", v));
        }
      } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
                 field->message_type() != Kwarg::descriptor()) {
        const google::protobuf::Message& nested =
            field->is_repeated() ? reflection->GetRepeatedMessage(message, field, i)
                                 : reflection->GetMessage(message, field);
        CheckFiniteNumbers(nested, loc.Nested(field->name(), index));
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

}  // namespace internal
}  // namespace kd
