#include "hooks/hook.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kd {

absl::Status NeverRanThroughHookPointError(const std::vector<std::string>& modules) {
  return absl::FailedPreconditionError(absl::StrCat(
      "hooked module(s) ", absl::StrJoin(modules, ", "),
      " never ran through a hook point during forward: a native module's hooks run only when "
      "its parent calls it through kd::Call(child, ...) or keeps it in a kd::HookedSequential, "
      "not through child->forward(...) (see hooks/hook_point.h)"));
}

}  // namespace kd
