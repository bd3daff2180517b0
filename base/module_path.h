// The syntax of module paths ("layer2.0.conv1"): dotted names as named_modules() gives them.
#ifndef LIBKD_BASE_MODULE_PATH_H_
#define LIBKD_BASE_MODULE_PATH_H_

#include <string>

#include "absl/strings/string_view.h"

namespace kd {

// What is wrong with the syntax of `path` ("" if nothing): an empty component (a leading,
// trailing or doubled "."), or whitespace. The empty path is the root module and fine.
std::string ModulePathProblem(absl::string_view path);

}  // namespace kd

#endif  // LIBKD_BASE_MODULE_PATH_H_
