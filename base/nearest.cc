#include "base/nearest.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kd {

size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<std::string> NearestNames(absl::string_view name,
                                      const std::vector<std::string>& candidates,
                                      size_t max_results) {
  std::vector<std::pair<size_t, size_t>> scored;  // (distance, index)
  scored.reserve(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    scored.emplace_back(EditDistance(name, candidates[i]), i);
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  const size_t limit = std::max<size_t>(3, name.size() / 2);
  std::vector<std::string> result;
  for (const auto& [distance, index] : scored) {
    if (result.size() >= max_results) break;
    if (distance > limit && !result.empty()) break;
    result.push_back(candidates[index]);
  }
  return result;
}

std::string QuoteName(absl::string_view name) {
  return name.empty() ? std::string("\"\" (root)") : absl::StrCat("\"", name, "\"");
}

std::string FormatNearest(absl::string_view name, const std::vector<std::string>& candidates,
                          size_t max_results) {
  std::vector<std::string> nearest = NearestNames(name, candidates, max_results);
  if (nearest.empty()) return "there are none";
  std::vector<std::string> quoted;
  for (const std::string& n : nearest) quoted.push_back(n.empty() ? "\"\" (root)" : n);
  return absl::StrCat("nearest: ", absl::StrJoin(quoted, ", "));
}

}  // namespace kd
