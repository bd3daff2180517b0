// Nearest names by edit distance, for error messages that suggest a fix.
//
//   std::vector<std::string> paths = {"layer1", "layer2", "fc"};
//   NearestNames("layer5", paths);          // {"layer1", "layer2", "fc"} sorted by distance
//   FormatNearest("layer5", paths);         // "nearest: layer1, layer2, fc"
#ifndef LIBKD_BASE_NEAREST_H_
#define LIBKD_BASE_NEAREST_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kd {

// Levenshtein distance (insertions, deletions, substitutions each cost 1).
size_t EditDistance(absl::string_view a, absl::string_view b);

// Up to `max_results` candidates ordered by edit distance to `name` (ties keep the candidates'
// order). Candidates farther than max(3, |name| / 2) are left out unless nothing is closer.
std::vector<std::string> NearestNames(absl::string_view name,
                                      const std::vector<std::string>& candidates,
                                      size_t max_results = 3);

// "nearest: a, b, c", or "there are none" when `candidates` is empty. Empty names print as "".
std::string FormatNearest(absl::string_view name, const std::vector<std::string>& candidates,
                          size_t max_results = 3);

// Quotes a name for a message: layer1 -> "layer1"; the empty root path -> "" (root).
std::string QuoteName(absl::string_view name);

}  // namespace kd

#endif  // LIBKD_BASE_NEAREST_H_
