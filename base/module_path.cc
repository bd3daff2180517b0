#include "base/module_path.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kd {

std::string ModulePathProblem(absl::string_view path) {
  if (path.empty()) return "";
  for (const char c : path) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      return absl::StrCat("module path \"", path,
                          "\" contains whitespace; module paths are dotted names as "
                          "named_modules() gives them, e.g. \"layer2.0.conv1\"");
    }
  }
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    if (!part.empty()) continue;
    std::string fixed;
    for (absl::string_view p : absl::StrSplit(path, '.', absl::SkipEmpty())) {
      absl::StrAppend(&fixed, fixed.empty() ? "" : ".", p);
    }
    return absl::StrCat("module path \"", path,
                        "\" has an empty component (a leading, trailing or doubled \".\")",
                        fixed.empty() ? "" : absl::StrCat("; did you mean \"", fixed, "\"?"));
  }
  return "";
}

}  // namespace kd
