// Nearest names by edit distance, for error messages that suggest a fix.
//
//   std::vector<std::string> paths = {"layer1", "layer2", "fc"};
//   NearestNames("layer5", paths);          // {"layer1", "layer2", "fc"} sorted by distance
//   Suggest("layer5", paths);               // did you mean "layer1" or "layer2"?
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

// The one wording of a suggestion for a name that is not among `candidates` (append it after
// "; "): DidYouMean when a candidate is near, ValidNames otherwise.
//   Suggest("layer5", {"layer1", "layer2", "fc"})  // did you mean "layer1" or "layer2"?
//   Suggest("xyz", {"train", "val"})               // valid: train, val
//   Suggest("xyz", {})                             // there are none
std::string Suggest(absl::string_view name, const std::vector<std::string>& candidates);

// `did you mean "a"?`, `did you mean "a" or "b"?`, `did you mean "a", "b" or "c"?`: the
// candidates nearest to `name` (ties, at most 3, in their order) if they are within a third of
// its length in edits (at least 2); "" otherwise.
std::string DidYouMean(absl::string_view name, const std::vector<std::string>& candidates);

// `valid: a, b, c` (the first `max_listed`, then `and N more`), or `there are none`.
std::string ValidNames(const std::vector<std::string>& candidates, size_t max_listed = 10);

// Quotes a name for a message: layer1 -> "layer1"; the empty root path -> "" (root).
std::string QuoteName(absl::string_view name);

}  // namespace kd

#endif  // LIBKD_BASE_NEAREST_H_
