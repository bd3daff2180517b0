// Reading whole files and writing them atomically.
//
//   KD_ASSIGN_OR_RETURN(std::string bytes, kd::ReadFile("in.pt"));
//   KD_RETURN_IF_ERROR(kd::WriteFileAtomically("ckpt/last.pt", bytes));
#ifndef LIBKD_BASE_FILE_UTIL_H_
#define LIBKD_BASE_FILE_UTIL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace kd {

// The most ReadFile reads unless told otherwise: larger than any model, checkpoint or input
// libkd expects, small enough that a wrong path fails with a message rather than bad_alloc.
inline constexpr int64_t kMaxReadBytes = int64_t{16} << 30;  // 16 GiB
// The most a text file (a config) may hold.
inline constexpr int64_t kMaxTextBytes = int64_t{64} << 20;  // 64 MiB

// The bytes of the regular file at `path`. Errors name the file and the reason: NotFound /
// PermissionDenied / Unavailable from errno; InvalidArgument for what is not a regular file
// (a folder, a FIFO, /dev/zero: opened without blocking and refused, never read) and for a
// file of more than `max_bytes`.
absl::StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes = kMaxReadBytes);

// OK if `path` is a regular file; NotFound / PermissionDenied naming it, or InvalidArgument
// for a folder, a FIFO or a device (as ReadFile words them). For readers that open files
// themselves (gzopen).
absl::Status CheckRegularFile(const std::string& path);

// "1.5 GiB", "64 MiB", "300 bytes".
std::string HumanBytes(int64_t bytes);

// OK if WriteFileAtomically could put a file at `path`: nothing there or a regular file
// (InvalidArgument for a FIFO, a device or a folder: only regular files are replaced), in a
// folder that exists (NotFound naming `path` and the folder) and is not in /dev, /proc or /sys
// (CheckNotInSystemFolder); a symbolic link in its place is refused too. For checks before
// work starts.
absl::Status CheckWritablePath(const std::string& path);

// InvalidArgument if `path` (a file or folder to be made) is in /dev, /proc or /sys once its
// links are resolved as far as they exist: they hold devices and kernel state, no files.
absl::Status CheckNotInSystemFolder(const std::string& path);

// Writes `data` to a temporary file next to `path`, flushes it to disk, and renames it over
// `path`, so a reader (or a crash) sees either the old file or the new one, never a mix.
// Refuses what CheckWritablePath refuses.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view data);

// As WriteFileAtomically, the file being `parts` one after another: for a large file whose
// pieces are already in memory (a header and tensors' bytes), written without joining them.
absl::Status WriteFileAtomicallyFromParts(const std::string& path,
                                          absl::Span<const absl::string_view> parts);

// Whether `a` and `b` name the same file: the same inode when both exist (hard links and
// symbolic links included), else the same path once made absolute and normalized.
bool SameFile(const std::string& a, const std::string& b);

// Whether `path` is `folder` or lies inside it, by their real places (links and `..`
// resolved as far as they exist).
bool IsWithinFolder(const std::string& path, const std::string& folder);

// `path` taken from `base` (a config's relative paths from the folder it is run in): unchanged
// when it is empty or absolute, or when `base` is empty.
std::string ResolveAgainst(const std::string& base, const std::string& path);

// Resolves a path given on a `bazel run` command line against the caller's folder
// (BUILD_WORKING_DIRECTORY); absolute paths and runs outside Bazel are unchanged.
std::string ResolveUserPath(const std::string& path);

}  // namespace kd

#endif  // LIBKD_BASE_FILE_UTIL_H_
