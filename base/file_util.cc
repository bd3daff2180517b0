#include "base/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"

namespace kd {
namespace {

absl::Status ErrnoStatus(int err, absl::string_view what, const std::string& path) {
  if (err == ELOOP) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": its symbolic links form a loop (or a chain of more than 40); give the path of "
        "the file itself"));
  }
  std::string message = absl::StrCat(path, ": cannot ", what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case EISDIR:
    case ENAMETOOLONG:
      return absl::InvalidArgumentError(message);
    default:
      return absl::UnavailableError(message);
  }
}

absl::string_view Dirname(absl::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == absl::string_view::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

std::string HumanBytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30)) return absl::StrFormat("%.1f GiB", bytes / double(1 << 30));
  if (bytes >= (int64_t{1} << 20)) return absl::StrFormat("%.1f MiB", bytes / double(1 << 20));
  return absl::StrCat(bytes, " bytes");
}

absl::Status NotRegular(const std::string& path, mode_t mode) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": is ", FileKind(mode),
                                                 "; libkd reads only regular files: give the path "
                                                 "of the file itself"));
}

absl::Status CheckRegularFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "open", path);
  if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(errno, "open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return NotRegular(path, st.st_mode);
  }
  if (st.st_size > max_bytes) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": is ", HumanBytes(st.st_size),
                                                   ", more than the ", HumanBytes(max_bytes),
                                                   " this file may hold; check the path"));
  }
  std::string data;
  data.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, "read", path);
    }
    if (n == 0) break;
    data.append(buffer, static_cast<size_t>(n));
    if (static_cast<int64_t>(data.size()) > max_bytes) {  // grew while being read
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": grew past the ", HumanBytes(max_bytes), " this file may hold while read"));
    }
  }
  ::close(fd);
  return data;
}

absl::Status CheckWritablePath(const std::string& path) {
  // Only a regular file is replaced: renaming over a FIFO or a device node (/dev/null, as root)
  // would put a regular file in its place, and renaming over a symbolic link (/dev/stdout)
  // would replace the link, so neither is written.
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path,
                       ": is a symbolic link; libkd neither writes through a link nor replaces "
                       "it: give the path of a file"));
    }
    if (!S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": is ", FileKind(st.st_mode),
                       "; libkd writes only regular files (replacing them whole): give the path "
                       "of a file"));
    }
  }
  const std::string dir(Dirname(path));
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot write it: its folder ", dir, " does not exist"));
  }
  return CheckNotInSystemFolder(path);
}

absl::Status CheckNotInSystemFolder(const std::string& path) {
  // The kernel's and the devices' folders hold no files of the user's.
  // By the path as written (/proc/self/cwd/x leads elsewhere, but through the kernel's
  // folder) and by its real place once links are resolved.
  std::error_code error;
  const std::string written = std::filesystem::absolute(path, error).lexically_normal().string();
  const std::string real = std::filesystem::weakly_canonical(path, error).string();
  for (const char* system : {"/dev", "/proc", "/sys"}) {
    const std::string prefix = absl::StrCat(system, "/");
    if (written == system || absl::StartsWith(written, prefix) ||
        (!error && (real == system || absl::StartsWith(real, prefix)))) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": is in ", system, ", which holds the system's devices and state, not files; "
          "give the path of a file elsewhere"));
    }
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view data) {
  return WriteFileAtomicallyFromParts(path, {data});
}

absl::Status WriteFileAtomicallyFromParts(const std::string& path,
                                          absl::Span<const absl::string_view> parts) {
  if (absl::Status writable = CheckWritablePath(path); !writable.ok()) return writable;
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  // A new file of its own: a leftover of the same name (a killed process of the same pid, or
  // a link planted there) is removed, never written through.
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EEXIST && ::unlink(tmp.c_str()) == 0) {
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  }
  if (fd < 0) {
    // Named by the file asked for, not the temporary one beside it.
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return absl::NotFoundError(
          absl::StrCat(path, ": cannot write it: its folder ", Dirname(path), " does not exist"));
    }
    return ErrnoStatus(err, "write", path);
  }
  for (const absl::string_view data : parts) {
    size_t written = 0;
    while (written < data.size()) {
      const ssize_t n = ::write(fd, data.data() + written, data.size() - written);
      if (n < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        return ErrnoStatus(err, "write", tmp);
      }
      written += static_cast<size_t>(n);
    }
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus(err, "flush", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus(err, "rename into place", path);
  }
  // Make the rename itself durable.
  const std::string dir(Dirname(path));
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return absl::OkStatus();
}

bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0) {
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  }
  std::error_code error;
  const std::filesystem::path pa = std::filesystem::weakly_canonical(a, error);
  if (error) return a == b;
  const std::filesystem::path pb = std::filesystem::weakly_canonical(b, error);
  if (error) return a == b;
  return pa == pb;
}

bool IsWithinFolder(const std::string& path, const std::string& folder) {
  std::error_code error;
  const std::filesystem::path real = std::filesystem::weakly_canonical(path, error);
  if (error) return false;
  const std::filesystem::path real_folder = std::filesystem::weakly_canonical(folder, error);
  if (error) return false;
  auto p = real.begin();
  for (auto f = real_folder.begin(); f != real_folder.end() && !f->empty(); ++f, ++p) {
    if (p == real.end() || *p != *f) return false;
  }
  return true;
}

std::string ResolveAgainst(const std::string& base, const std::string& path) {
  if (path.empty() || base.empty() || std::filesystem::path(path).is_absolute()) return path;
  return (std::filesystem::path(base) / path).string();
}

std::string ResolveUserPath(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (cwd == nullptr || *cwd == '\0') return path;
  return absl::StrCat(cwd, "/", path);
}

}  // namespace kd
