#include "distill/procs/proc_func.h"

#include <c10/util/Exception.h>

#include "absl/strings/str_join.h"

#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"

namespace kd {
namespace proc_internal {

Kwargs Merge(const Kwargs& defaults, const Kwargs& overrides) {
  Kwargs merged = defaults;
  for (const auto& [name, value] : overrides) merged.insert_or_assign(name, value);
  return merged;
}

absl::Status Failure(absl::string_view kind, absl::string_view key, const std::exception& e) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  return absl::InternalError(
      absl::StrCat(kind, " \"", key,
                   "\" failed: ", torch_error ? torch_error->what_without_backtrace() : e.what()));
}

}  // namespace proc_internal

template <typename Kind>
Registry<ProcFn<Kind>>& ProcRegistry() {
  static Registry<ProcFn<Kind>>* const registry =
      NewGlobalRegistry<ProcFn<Kind>>(std::string(Kind::kKind));
  return *registry;
}

template Registry<ProcFn<PreEpochProc>>& ProcRegistry<PreEpochProc>();
template Registry<ProcFn<PreForwardProc>>& ProcRegistry<PreForwardProc>();
template Registry<ProcFn<ForwardProc>>& ProcRegistry<ForwardProc>();
template Registry<ProcFn<PostForwardProc>>& ProcRegistry<PostForwardProc>();
template Registry<ProcFn<PostEpochProc>>& ProcRegistry<PostEpochProc>();

// The five registries are listed by kind from the start, registered functions or not.
[[maybe_unused]] static const bool kProcRegistriesCreated =
    (ProcRegistry<PreEpochProc>(), ProcRegistry<PreForwardProc>(), ProcRegistry<ForwardProc>(),
     ProcRegistry<PostForwardProc>(), ProcRegistry<PostEpochProc>(), true);

namespace {

// (field name, deprecated field name) of the stage-level process functions.
constexpr std::pair<absl::string_view, absl::string_view> kStageProcFields[] = {
    {PreEpochProc::kKind, PreEpochProc::kDeprecatedKey},
    {PreForwardProc::kKind, PreForwardProc::kDeprecatedKey},
    {PostForwardProc::kKind, PostForwardProc::kDeprecatedKey},
    {PostEpochProc::kKind, PostEpochProc::kDeprecatedKey},
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

absl::StatusOr<ProcFunc<ForwardProc>> BuildForwardProcFunc(const StageModelConfig& model) {
  if (!model.has_forward_proc())
    return BuildProcFunc<ForwardProc>(DefaultProcKey<ForwardProc>(true));
  return BuildProcFunc<ForwardProc>(model.forward_proc());
}

}  // namespace kd
