// The teacher cache's spill file (internal/teacher_cache.h): made safely, bounded, checked on
// every read, removed when the cache turns off.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/torch_archive.h"
#include "distill/boxes/internal/teacher_cache.h"

namespace kd {
namespace boxes_internal {

void TeacherCache::RemoveSpill() {
  if (spill_fd_ < 0) return;
  close(spill_fd_);
  spill_fd_ = -1;
  unlink(options_.spill_path.c_str());
  spill_crc_.clear();
  stats_.bytes_disk = 0;
}

void TeacherCache::Disable(std::string reason) {
  disabled_reason_ = std::move(reason);
  RemoveSpill();
}

absl::Status TeacherCache::OpenSpill() {
  const std::string& path = options_.spill_path;
  // A leftover of this run's own (a spill a killed run left) is a regular file: removed. A
  // symbolic link or anything else in its place is refused, never written through.
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the spill file ", path, " is ",
          S_ISLNK(st.st_mode) ? "a symbolic link" : "not a regular file",
          ", which libkd does not write through: remove it"));
    }
    unlink(path.c_str());
  }
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot create the spill file ", path, ": ", std::strerror(errno)));
  }
  // The budget, fixed before the first row is written: the configured one, and never more
  // than half of what the disk has free (checkpoints must still fit beside it).
  struct statvfs fs;
  int64_t budget = options_.disk_bytes > 0 ? options_.disk_bytes : INT64_MAX;
  if (fstatvfs(fd, &fs) == 0) {
    budget = std::min<int64_t>(budget, static_cast<int64_t>(fs.f_bavail) *
                                           static_cast<int64_t>(fs.f_frsize) / 2);
  }
  spill_fd_ = fd;
  spill_budget_ = budget;
  return absl::OkStatus();
}

absl::Status TeacherCache::Load(int64_t slot, char* out) {
  if (slot < memory_rows_) {
    std::memcpy(out, memory_.data() + slot * row_bytes_, static_cast<size_t>(row_bytes_));
    return absl::OkStatus();
  }
  const int64_t disk_slot = slot - memory_rows_;
  const off_t at = static_cast<off_t>(disk_slot) * row_bytes_;
  std::string why;
  errno = 0;  // a short read sets none
  if (spill_fd_ < 0 || disk_slot >= static_cast<int64_t>(spill_crc_.size())) {
    why = "its row is gone";
  } else if (pread(spill_fd_, out, static_cast<size_t>(row_bytes_), at) != row_bytes_) {
    why = absl::StrCat("cannot read it back: ", errno != 0 ? std::strerror(errno) : "cut short");
  } else if (Crc32(absl::string_view(out, static_cast<size_t>(row_bytes_))) !=
             spill_crc_[static_cast<size_t>(disk_slot)]) {
    why = absl::StrCat("row ", disk_slot,
                       " changed on disk after it was written (its CRC-32 differs)");
  } else {
    return absl::OkStatus();
  }
  const std::string reason = absl::StrCat("the spill file ", options_.spill_path, ": ", why);
  Disable(reason);
  if (options_.required) {
    return absl::DataLossError(absl::StrCat("teacher_cache: ", reason,
                                            "; the teacher's values are recomputed with "
                                            "teacher_cache { mode: AUTO } or OFF"));
  }
  return absl::CancelledError(reason);  // off; the caller recomputes
}

}  // namespace boxes_internal
}  // namespace kd
