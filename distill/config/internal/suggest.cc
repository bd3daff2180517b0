#include "distill/config/internal/suggest.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/nearest.h"

namespace kd {
namespace internal {

std::string DidYouMean(absl::string_view name, const std::vector<std::string>& candidates) {
  const std::vector<std::string> nearest = NearestNames(name, candidates, 1);
  if (nearest.empty()) return "";
  const size_t limit = std::max<size_t>(1, (name.size() + 1) / 3);
  if (EditDistance(name, nearest[0]) > limit) return "";
  return absl::StrCat(" (did you mean \"", nearest[0], "\"?)");
}

std::string ValidNames(absl::string_view what, const std::vector<std::string>& names) {
  if (names.empty()) return absl::StrCat("; ", what, " none");
  return absl::StrCat("; ", what, ": ", absl::StrJoin(names, ", "));
}

}  // namespace internal
}  // namespace kd
