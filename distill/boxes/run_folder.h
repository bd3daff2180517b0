// A run folder belongs to one run: RunFolder::Claim takes it for this process's run and holds
// it until the RunFolder is destroyed.
//
//   KD_ASSIGN_OR_RETURN(kd::RunFolder folder,
//                       kd::RunFolder::Claim("runs/kd", {.checkpoint_dir = "runs/kd/ckpt"}));
//
// What a claim guarantees, checked before the first step:
// - one run at a time: a lock (flock on <run folder>/.libkd.lock, which holds the owner's pid)
//   is held for the claim's life; a second run is refused naming the holder's pid, and the lock
//   goes with the process however it ends (a kill included);
// - an earlier run is never mixed into this one: a folder holding one (metrics.jsonl,
//   summary.json or checkpoints of the names the run writes: last.pt, best.pt, <stage>.pt,
//   <stage>_epoch<N>.pt) is refused unless the run resumes it or overwrites it, and
//   overwriting removes those files first (never a file the run reads, never another file in
//   the checkpoint folder: a user's own models there are left alone);
// - a checkpoint folder outside the run folder is locked as the run folder is, so two runs
//   never share one;
// - the files the run will write are writable (the checkpoint folder is created), are none of
//   its inputs (a teacher named ckpt/last.pt would be replaced by the first checkpoint), and
//   are written where asked: not in /dev, /proc or /sys, not inside a data folder, not through
//   a checkpoint folder that is a symbolic link (checked before anything is made);
// - temporary files a killed writer left (`<file>.tmp.<pid>` of a pid no longer running) are
//   removed.
#ifndef LIBKD_DISTILL_BOXES_RUN_FOLDER_H_
#define LIBKD_DISTILL_BOXES_RUN_FOLDER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kd {

struct RunFolderOptions {
  // Continue the run the folder holds (its files are kept and appended to).
  bool resume = false;
  // Replace the run the folder holds: its metrics, summary and checkpoints are removed.
  bool overwrite = false;
  // Where the run's checkpoints go (absolute or relative to the working directory). Default:
  // <run folder>/ckpt.
  std::string checkpoint_dir;
  // Files the run reads (models, checkpoints, the config): never removed by `overwrite`.
  std::vector<std::string> inputs;
  // The names of the run's stages: its checkpoints are <stage>.pt and <stage>_epoch<N>.pt.
  std::vector<std::string> stage_names;
  // Folders of the data the run reads (a dataset's root): neither the run folder nor the
  // checkpoint folder may be inside one.
  std::vector<std::string> data_folders;
};

// Whether `filename` (in a checkpoint folder) is a checkpoint a run of these stages writes.
bool IsRunCheckpoint(const std::string& filename, const std::vector<std::string>& stage_names);

class RunFolder {
 public:
  // Claims `path` (created if missing). Errors: AlreadyExists when another run holds the folder
  // (naming its pid) or the folder holds an earlier run (naming its files and the flags that
  // decide); InvalidArgument / PermissionDenied / NotFound when the folder or a file the run
  // writes cannot be written, naming it.
  static absl::StatusOr<RunFolder> Claim(const std::string& path,
                                         const RunFolderOptions& options = {});

  RunFolder(RunFolder&& other) noexcept;
  RunFolder& operator=(RunFolder&& other) noexcept;
  RunFolder(const RunFolder&) = delete;
  RunFolder& operator=(const RunFolder&) = delete;
  ~RunFolder();  // releases the lock

  const std::string& path() const { return path_; }

  // The lock file's name inside a run folder.
  static constexpr char kLockName[] = ".libkd.lock";

 private:
  RunFolder(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  std::string path_;
  int fd_ = -1;
  int checkpoint_fd_ = -1;  // the checkpoint folder's lock, when it is outside the run folder
};

}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_RUN_FOLDER_H_
