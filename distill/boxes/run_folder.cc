#include "distill/boxes/run_folder.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file_util.h"
#include "base/status_macros.h"

namespace kd {
namespace {

namespace fs = std::filesystem;

// The files a run leaves in its folder (besides checkpoints), as the tools and boxes name them.
constexpr const char* kRunFiles[] = {"metrics.jsonl", "summary.json"};

absl::Status Unwritable(const std::string& what, int err) {
  const std::string message = absl::StrCat(what, ": cannot write it: ", std::strerror(err),
                                           "; give --run_dir (or run.run_dir) a folder you can "
                                           "write");
  if (err == EACCES || err == EPERM || err == EROFS) return absl::PermissionDeniedError(message);
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(message);
  return absl::InvalidArgumentError(message);
}

bool IsInput(const std::string& file, const std::vector<std::string>& inputs) {
  for (const std::string& input : inputs) {
    if (SameFile(file, input)) return true;
  }
  return false;
}

// A pid written after ".tmp." by WriteFileAtomically, if `name` is such a temporary file.
bool TemporaryOfPid(const std::string& name, pid_t* pid) {
  const size_t at = name.rfind(".tmp.");
  if (at == std::string::npos) return false;
  int64_t value = 0;
  if (!absl::SimpleAtoi(name.substr(at + 5), &value) || value <= 0) return false;
  *pid = static_cast<pid_t>(value);
  return true;
}

bool Running(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

// Regular files directly in `dir` (none if it is missing).
std::vector<fs::path> FilesIn(const std::string& dir) {
  std::vector<fs::path> files;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    if (it->is_regular_file(error)) files.push_back(it->path());
  }
  return files;
}

// Creates `folder` (and its parents); InvalidArgument naming it as `what` and the setting to
// change (`setting`) when it cannot be made or something else is in its place.
absl::Status MakeFolder(const std::string& folder, absl::string_view what,
                        absl::string_view setting) {
  std::error_code error;
  fs::create_directories(folder, error);
  if (error || !fs::is_directory(folder)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " ", folder,
        ": cannot create it: ", error ? error.message() : "a file of that name is in the way",
        "; give ", setting, " a folder"));
  }
  return absl::OkStatus();
}

// Takes the lock file in `folder` (its pid written for others' messages): the descriptor, or
// AlreadyExists naming the holder's pid.
absl::StatusOr<int> Lock(const std::string& folder, const std::string& what) {
  const std::string lock_path = (fs::path(folder) / RunFolder::kLockName).string();
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return Unwritable(absl::StrCat(what, " ", folder), errno);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buffer[32] = {};
    const ssize_t n = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) return Unwritable(lock_path, err);
    const std::string holder(absl::StripAsciiWhitespace(std::string(buffer, n > 0 ? n : 0)));
    return absl::AlreadyExistsError(absl::StrCat(
        what, " ", folder, " is in use by another run (pid ", holder.empty() ? "?" : holder,
        "); wait for it to end, or give another ",
        what == "run folder" ? "--run_dir" : "checkpoint.dir"));
  }
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int err = errno;
    ::close(fd);
    return Unwritable(lock_path, err);
  }
  return fd;
}

}  // namespace

bool IsRunCheckpoint(const std::string& filename, const std::vector<std::string>& stage_names) {
  if (filename == "last.pt" || filename == "best.pt") return true;
  if (!absl::EndsWith(filename, ".pt")) return false;
  const std::string stem = filename.substr(0, filename.size() - 3);
  for (const std::string& stage : stage_names) {
    if (stem == stage) return true;
    const std::string prefix = stage + "_epoch";
    if (absl::StartsWith(stem, prefix) && stem.size() > prefix.size() &&
        std::all_of(stem.begin() + static_cast<int64_t>(prefix.size()), stem.end(),
                    [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); })) {
      return true;
    }
  }
  return false;
}

absl::StatusOr<RunFolder> RunFolder::Claim(const std::string& path,
                                           const RunFolderOptions& options) {
  const std::string ckpt_dir =
      options.checkpoint_dir.empty() ? (fs::path(path) / "ckpt").string() : options.checkpoint_dir;
  // Where the run writes, checked before either folder is made: not in /dev, /proc or /sys,
  // not inside the data it reads, not through a checkpoint folder that is a link.
  for (const std::string& folder : {path, ckpt_dir}) {
    const std::string what = folder == path ? "run folder " : "checkpoint folder ";
    if (absl::Status outside = CheckNotInSystemFolder(folder); !outside.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, outside.message()));
    }
    for (const std::string& data : options.data_folders) {
      // Inside a data folder that holds the working directory too (data in the project's
      // own tree, `root: "."`) the runs/ folders are the user's layout, not the data.
      std::error_code cwd_error;
      const std::string cwd = fs::current_path(cwd_error).string();
      const bool project_tree = !cwd_error && IsWithinFolder(cwd, data);
      if (SameFile(folder, data) || (!project_tree && IsWithinFolder(folder, data))) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, folder, " is inside ", data,
            ", a folder of the data the run reads: give --run_dir (or run.run_dir, "
            "checkpoint.dir) a folder elsewhere"));
      }
    }
  }
  struct stat link_st;
  if (::lstat(ckpt_dir.c_str(), &link_st) == 0 && S_ISLNK(link_st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint folder ", ckpt_dir,
        " is a symbolic link; libkd does not write checkpoints (or remove them with "
        "--overwrite) through a link: remove it, or give checkpoint.dir the folder itself"));
  }
  // A file the run reads that the run would write over (a teacher named ckpt/last.pt). A
  // resumed run reads its own checkpoints.
  if (!options.resume) {
    for (const std::string& input : options.inputs) {
      const fs::path file(input);
      const bool in_ckpt = IsRunCheckpoint(file.filename().string(), options.stage_names) &&
                           SameFile(file.parent_path().string(), ckpt_dir);
      bool run_file = false;
      for (const char* name : kRunFiles) {
        run_file |= SameFile(input, (fs::path(path) / name).string());
      }
      if (in_ckpt || run_file) {
        return absl::InvalidArgumentError(absl::StrCat(
            input, " is an input of the run and a file the run writes (",
            in_ckpt ? "its checkpoint " : "its ", file.filename().string(),
            "): move it, or give the run another ",
            in_ckpt ? "checkpoint.dir" : "--run_dir"));
      }
    }
  }
  std::error_code error;
  KD_RETURN_IF_ERROR(MakeFolder(path, "run folder", "--run_dir (or run.run_dir)"));
  // The lock: flock is released with the descriptor, so a killed run never leaves the folder
  // locked; the pid in the file is only for the message.
  KD_ASSIGN_OR_RETURN(const int fd, Lock(path, "run folder"));
  RunFolder folder(path, fd);

  // A checkpoint folder elsewhere is claimed too: two runs sharing one would mix checkpoints.
  if (!IsWithinFolder(ckpt_dir, path)) {
    fs::create_directories(ckpt_dir, error);
    if (fs::is_directory(ckpt_dir, error)) {
      KD_ASSIGN_OR_RETURN(folder.checkpoint_fd_, Lock(ckpt_dir, "checkpoint folder"));
    }
  }
  // Temporary files a killed writer left between write and rename.
  for (const std::string& dir : {path, ckpt_dir}) {
    for (const fs::path& file : FilesIn(dir)) {
      pid_t owner = 0;
      if (TemporaryOfPid(file.filename().string(), &owner) && !Running(owner)) {
        fs::remove(file, error);
      }
    }
  }

  // An earlier run in the folder: its files, and its checkpoints (never an input of this run).
  std::vector<fs::path> earlier;
  for (const char* name : kRunFiles) {
    const fs::path file = fs::path(path) / name;
    if (fs::exists(fs::symlink_status(file, error))) earlier.push_back(file);
  }
  std::vector<fs::path> checkpoints = FilesIn(ckpt_dir);
  std::sort(checkpoints.begin(), checkpoints.end());
  for (const fs::path& file : checkpoints) {
    if (IsRunCheckpoint(file.filename().string(), options.stage_names) &&
        !IsInput(file.string(), options.inputs)) {
      earlier.push_back(file);
    }
  }
  if (!earlier.empty() && !options.resume) {
    if (!options.overwrite) {
      constexpr size_t kNamed = 5;
      std::vector<std::string> names;
      for (size_t i = 0; i < earlier.size() && i < kNamed; ++i) {
        names.push_back(earlier[i].lexically_relative(path).string());
      }
      if (earlier.size() > kNamed) names.push_back(absl::StrCat(earlier.size() - kNamed, " more"));
      return absl::AlreadyExistsError(absl::StrCat(
          "run folder ", path, " holds an earlier run (", absl::StrJoin(names, ", "),
          "): give --resume to continue it, --overwrite to replace it, or another --run_dir"));
    }
    for (const fs::path& file : earlier) {
      if (!fs::remove(file, error) && error) {
        return Unwritable(file.string(), error.value());
      }
    }
  }

  // What the run will write: the checkpoint folder, and the run files where they exist.
  KD_RETURN_IF_ERROR(MakeFolder(ckpt_dir, "checkpoint folder", "checkpoint.dir"));
  if (::access(ckpt_dir.c_str(), W_OK) != 0) {
    return Unwritable(absl::StrCat("checkpoint folder ", ckpt_dir), errno);
  }
  // Checkpoints are written by WriteFileAtomically: what it would refuse at the first
  // checkpoint (the folder in /dev, /proc or /sys, a link in last.pt's place) is refused now.
  for (const char* name : {"last.pt", "best.pt"}) {
    if (absl::Status writable = CheckWritablePath((fs::path(ckpt_dir) / name).string());
        absl::IsInvalidArgument(writable)) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint folder ", ckpt_dir, ": ", writable.message()));
    }
  }
  for (const char* name : kRunFiles) {
    const std::string file = (fs::path(path) / name).string();
    struct stat st;
    if (::lstat(file.c_str(), &st) != 0) continue;
    if (!S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": is not a regular file; the run writes its ", name,
                       " there: move it away, or give another --run_dir"));
    }
    if (::access(file.c_str(), W_OK) != 0) return Unwritable(file, errno);
  }
  return folder;
}

RunFolder::RunFolder(RunFolder&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      checkpoint_fd_(std::exchange(other.checkpoint_fd_, -1)) {}

RunFolder& RunFolder::operator=(RunFolder&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    if (checkpoint_fd_ >= 0) ::close(checkpoint_fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    checkpoint_fd_ = std::exchange(other.checkpoint_fd_, -1);
  }
  return *this;
}

RunFolder::~RunFolder() {
  if (fd_ >= 0) ::close(fd_);
  if (checkpoint_fd_ >= 0) ::close(checkpoint_fd_);
}

}  // namespace kd
