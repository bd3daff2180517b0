// "Did you mean" suggestions for config messages.
#ifndef LIBKD_DISTILL_CONFIG_INTERNAL_SUGGEST_H_
#define LIBKD_DISTILL_CONFIG_INTERNAL_SUGGEST_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kd {
namespace internal {

// ` (did you mean "temperature"?)` when a candidate is within a third of `name`'s length in
// edit distance (at least 1), the nearest first; "" otherwise.
std::string DidYouMean(absl::string_view name, const std::vector<std::string>& candidates);

// `; it takes: a, b` / `; it takes none`: a list of the valid names.
std::string ValidNames(absl::string_view what, const std::vector<std::string>& names);

}  // namespace internal
}  // namespace kd

#endif  // LIBKD_DISTILL_CONFIG_INTERNAL_SUGGEST_H_
