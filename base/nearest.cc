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

namespace {

// The candidates at the smallest edit distance from `name` (in their order, at most
// `max_results`), if that distance is within a third of `name`'s length (at least 2).
std::vector<std::string> NearNames(absl::string_view name,
                                   const std::vector<std::string>& candidates, size_t max_results) {
  size_t best = std::max<size_t>(2, (name.size() + 1) / 3);
  std::vector<std::string> near;
  for (const std::string& candidate : candidates) {
    const size_t distance = EditDistance(name, candidate);
    if (distance < best) {
      best = distance;
      near.clear();
    }
    if (distance == best && near.size() < max_results) near.push_back(candidate);
  }
  return near;
}

}  // namespace

std::string DidYouMean(absl::string_view name, const std::vector<std::string>& candidates) {
  std::vector<std::string> near = NearNames(name, candidates, 3);
  if (near.empty()) return "";
  for (std::string& n : near) n = n.empty() ? "\"\" (root)" : absl::StrCat("\"", n, "\"");
  if (near.size() == 1) return absl::StrCat("did you mean ", near[0], "?");
  const std::string last = near.back();
  near.pop_back();
  return absl::StrCat("did you mean ", absl::StrJoin(near, ", "), " or ", last, "?");
}

std::string ValidNames(const std::vector<std::string>& candidates, size_t max_listed) {
  if (candidates.empty()) return "there are none";
  std::vector<std::string> listed;
  for (size_t i = 0; i < candidates.size() && i < max_listed; ++i) {
    listed.push_back(candidates[i].empty() ? "\"\" (root)" : candidates[i]);
  }
  std::string out = absl::StrCat("valid: ", absl::StrJoin(listed, ", "));
  if (candidates.size() > listed.size()) {
    absl::StrAppend(&out, " and ", candidates.size() - listed.size(), " more");
  }
  return out;
}

std::string Suggest(absl::string_view name, const std::vector<std::string>& candidates) {
  std::string near = DidYouMean(name, candidates);
  return near.empty() ? ValidNames(candidates) : near;
}

}  // namespace kd
