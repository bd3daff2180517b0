// Reading whole files and writing them atomically.
//
//   KD_ASSIGN_OR_RETURN(std::string bytes, kd::ReadFile("in.pt"));
//   KD_RETURN_IF_ERROR(kd::WriteFileAtomically("ckpt/last.pt", bytes));
#ifndef LIBKD_BASE_FILE_UTIL_H_
#define LIBKD_BASE_FILE_UTIL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kd {

// The file's bytes; NotFound / PermissionDenied / Unavailable naming the file and the reason.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Writes `data` to a temporary file next to `path`, flushes it to disk, and renames it over
// `path`, so a reader (or a crash) sees either the old file or the new one, never a mix.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view data);

// Resolves a path given on a `bazel run` command line against the caller's folder
// (BUILD_WORKING_DIRECTORY); absolute paths and runs outside Bazel are unchanged.
std::string ResolveUserPath(const std::string& path);

}  // namespace kd

#endif  // LIBKD_BASE_FILE_UTIL_H_
