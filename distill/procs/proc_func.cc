#include "distill/procs/proc_func.h"

#include <c10/util/Exception.h>

#include "absl/strings/str_join.h"

namespace kd {
namespace procs_internal {

absl::Status Failure(absl::string_view kind, absl::string_view key, const std::exception& e) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  return absl::InternalError(
      absl::StrCat(kind, " \"", key,
                   "\" failed: ", torch_error ? torch_error->what_without_backtrace() : e.what()));
}

}  // namespace procs_internal

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

absl::StatusOr<ProcFunc<ForwardProc>> BuildForwardProcFunc(const StageModelConfig& model) {
  if (!model.has_forward_proc())
    return BuildProcFunc<ForwardProc>(DefaultProcKey<ForwardProc>(true));
  return BuildProcFunc<ForwardProc>(model.forward_proc());
}

}  // namespace kd
