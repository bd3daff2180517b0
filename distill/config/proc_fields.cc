#include "distill/config/proc_fields.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"

namespace kd {
namespace {

// (field name, deprecated field name) of the stage-level process functions.
constexpr std::pair<absl::string_view, absl::string_view> kStageProcFields[] = {
    {kPreEpochProcKind, kPreEpochProcDeprecated},
    {kPreForwardProcKind, kPreForwardProcDeprecated},
    {kPostForwardProcKind, kPostForwardProcDeprecated},
    {kPostEpochProcKind, kPostEpochProcDeprecated},
};

const PluginConfig* FieldIfSet(const StageConfig& stage, absl::string_view name) {
  const google::protobuf::FieldDescriptor* field =
      StageConfig::descriptor()->FindFieldByName(std::string(name));
  const google::protobuf::Reflection* reflection = StageConfig::GetReflection();
  if (!reflection->HasField(stage, field)) return nullptr;
  return static_cast<const PluginConfig*>(&reflection->GetMessage(stage, field));
}

}  // namespace

absl::StatusOr<const PluginConfig*> GetProcConfig(const StageConfig& stage, absl::string_view key) {
  for (const auto& [name, deprecated] : kStageProcFields) {
    if (key != name && key != deprecated) continue;
    const PluginConfig* current = FieldIfSet(stage, name);
    const PluginConfig* old = FieldIfSet(stage, deprecated);
    if (current != nullptr && old != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "give \"", name, "\" or its deprecated name \"", deprecated, "\", not both"));
    }
    return current != nullptr ? current : old;
  }
  std::vector<std::string> keys;
  for (const auto& [name, deprecated] : kStageProcFields) keys.emplace_back(name);
  return absl::InvalidArgumentError(absl::StrCat(
      "\"", key, "\" is no stage process function; use one of ", absl::StrJoin(keys, ", ")));
}

std::string ProcKey(const StageConfig& stage, absl::string_view key) {
  absl::StatusOr<const PluginConfig*> config = GetProcConfig(stage, key);
  return config.ok() && *config != nullptr ? (*config)->key() : std::string();
}

}  // namespace kd
