#include "distill/boxes/run_folder.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "base/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name;
  fs::remove_all(dir);
  return dir;
}

void Touch(const std::string& path, const std::string& text = "x") {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

TEST(RunFolderTest, SecondRunIsRefusedNamingTheHolder) {
  const std::string dir = FreshDir("locked");
  absl::StatusOr<RunFolder> first = RunFolder::Claim(dir);
  ASSERT_THAT(first, IsOk());
  EXPECT_THAT(
      RunFolder::Claim(dir, {.resume = true}),
      StatusIs(absl::StatusCode::kAlreadyExists,
               absl::StrCat("run folder ", dir, " is in use by another run (pid ", ::getpid(),
                            "); wait for it to end, or give another --run_dir")));
  // Released with the claim.
  *first = RunFolder::Claim(FreshDir("other")).value();
  EXPECT_THAT(RunFolder::Claim(dir), IsOk());
}

// The lock goes with its process however the process ends: a run killed with SIGKILL leaves the
// folder free for the next one.
TEST(RunFolderTest, KilledHolderLeavesTheFolderFree) {
  const std::string dir = FreshDir("killed");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    absl::StatusOr<RunFolder> held = RunFolder::Claim(dir);
    const char byte = held.ok() ? 'y' : 'n';
    (void)!::write(ready[1], &byte, 1);
    ::pause();
    std::_Exit(0);
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ASSERT_EQ(byte, 'y');
  EXPECT_THAT(RunFolder::Claim(dir), StatusIs(absl::StatusCode::kAlreadyExists,
                                              HasSubstr(absl::StrCat("(pid ", child, ")"))));
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_THAT(RunFolder::Claim(dir), IsOk());
}

TEST(RunFolderTest, EarlierRunIsRefusedUnlessResumedOrOverwritten) {
  const std::string dir = FreshDir("earlier");
  Touch(dir + "/metrics.jsonl", "{\"old\":1}\n");
  Touch(dir + "/summary.json");
  Touch(dir + "/ckpt/last.pt");
  Touch(dir + "/ckpt/best.pt");
  EXPECT_THAT(RunFolder::Claim(dir),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       absl::StrCat("run folder ", dir,
                                    " holds an earlier run (metrics.jsonl, summary.json, "
                                    "ckpt/best.pt, ckpt/last.pt): give --resume to continue it, "
                                    "--overwrite to replace it, or another --run_dir")));
  EXPECT_TRUE(fs::exists(dir + "/ckpt/last.pt"));
  {
    // Resuming keeps everything.
    ASSERT_THAT(RunFolder::Claim(dir, {.resume = true}), IsOk());
    EXPECT_TRUE(fs::exists(dir + "/metrics.jsonl"));
    EXPECT_TRUE(fs::exists(dir + "/ckpt/best.pt"));
  }
  // Overwriting removes the earlier run's files, but never a file this run reads.
  Touch(dir + "/ckpt/teacher.pt");
  Touch(dir + "/notes.txt");
  ASSERT_THAT(RunFolder::Claim(dir, {.overwrite = true, .inputs = {dir + "/ckpt/teacher.pt"}}),
              IsOk());
  EXPECT_FALSE(fs::exists(dir + "/metrics.jsonl"));
  EXPECT_FALSE(fs::exists(dir + "/summary.json"));
  EXPECT_FALSE(fs::exists(dir + "/ckpt/last.pt"));
  EXPECT_FALSE(fs::exists(dir + "/ckpt/best.pt"));
  EXPECT_TRUE(fs::exists(dir + "/ckpt/teacher.pt"));
  EXPECT_TRUE(fs::exists(dir + "/notes.txt"));
  // An input is not an earlier run's file: the folder is free for a fresh run now.
  EXPECT_THAT(RunFolder::Claim(dir, {.inputs = {dir + "/ckpt/teacher.pt"}}), IsOk());
}

// --overwrite removes only what a run of these stages writes: a user's own models in the
// checkpoint folder are neither an earlier run nor removed.
TEST(RunFolderTest, OverwriteRemovesOnlyTheRunsOwnCheckpoints) {
  const std::string dir = FreshDir("own_checkpoints");
  for (const char* name : {"last.pt", "best.pt", "kd.pt", "kd_epoch3.pt", "hint_epoch10.pt",
                           "my_model.pt", "kd_epochX.pt", "teacher_v2.pt"}) {
    Touch(dir + "/ckpt/" + name);
  }
  const RunFolderOptions options = {.overwrite = true, .stage_names = {"hint", "kd"}};
  ASSERT_THAT(RunFolder::Claim(dir, options), IsOk());
  for (const char* gone : {"last.pt", "best.pt", "kd.pt", "kd_epoch3.pt", "hint_epoch10.pt"}) {
    EXPECT_FALSE(fs::exists(dir + "/ckpt/" + gone)) << gone;
  }
  for (const char* kept : {"my_model.pt", "kd_epochX.pt", "teacher_v2.pt"}) {
    EXPECT_TRUE(fs::exists(dir + "/ckpt/" + kept)) << kept;
  }
  // What is left is no earlier run.
  EXPECT_THAT(RunFolder::Claim(dir, {.stage_names = {"hint", "kd"}}), IsOk());
  EXPECT_TRUE(IsRunCheckpoint("stage0_epoch12.pt", {"stage0"}));
  EXPECT_FALSE(IsRunCheckpoint("stage0_epoch.pt", {"stage0"}));
  EXPECT_FALSE(IsRunCheckpoint("stage1.pt", {"stage0"}));
}

// A checkpoint folder outside the run folder is claimed with it: a second run with its own run
// folder but the same checkpoint.dir is refused, naming the holder.
TEST(RunFolderTest, ASharedCheckpointFolderIsLocked) {
  const std::string shared = FreshDir("shared_ckpt");
  const std::string a = FreshDir("run_a"), b = FreshDir("run_b");
  absl::StatusOr<RunFolder> first = RunFolder::Claim(a, {.checkpoint_dir = shared});
  ASSERT_THAT(first, IsOk());
  EXPECT_THAT(RunFolder::Claim(b, {.checkpoint_dir = shared}),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       absl::StrCat("checkpoint folder ", shared, " is in use by another run (pid ",
                                    ::getpid(), "); wait for it to end, or give another "
                                    "checkpoint.dir")));
  // The run folder b is free again for a run with a checkpoint folder of its own.
  *first = RunFolder::Claim(FreshDir("run_c")).value();
  EXPECT_THAT(RunFolder::Claim(b, {.checkpoint_dir = shared}), IsOk());
}

// Nothing is made in /dev, /proc or /sys: refused before any folder is created.
TEST(RunFolderTest, SystemFoldersAreRefusedBeforeAnythingIsMade) {
  EXPECT_THAT(RunFolder::Claim("/dev/shm/libkd_run_folder_test"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "run folder /dev/shm/libkd_run_folder_test: is in /dev, which holds the "
                       "system's devices and state, not files; give the path of a file "
                       "elsewhere"));
  EXPECT_FALSE(fs::exists("/dev/shm/libkd_run_folder_test"));
  const std::string dir = FreshDir("system_ckpt");
  EXPECT_THAT(RunFolder::Claim(dir, {.checkpoint_dir = "/proc/self/libkd_ckpt"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("checkpoint folder /proc/self/libkd_ckpt: is in /proc")));
}

// A checkpoint folder that is a link is not written through (nor emptied by --overwrite); a
// file the run reads that it would write over (a teacher at ckpt/last.pt) is refused.
TEST(RunFolderTest, LinkedCheckpointFoldersAndInputsInTheWayAreRefused) {
  const std::string user = FreshDir("users_models");
  Touch(user + "/last.pt", "the user's");
  const std::string dir = FreshDir("linked_ckpt");
  fs::create_directories(dir);
  fs::create_directory_symlink(user, dir + "/ckpt");
  EXPECT_THAT(RunFolder::Claim(dir, {.overwrite = true}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ckpt is a symbolic link; libkd does not write checkpoints")));
  std::ifstream kept(user + "/last.pt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "the user's");
  EXPECT_FALSE(fs::exists(user + "/" + RunFolder::kLockName));

  const std::string run = FreshDir("teacher_in_ckpt");
  Touch(run + "/ckpt/last.pt", "a teacher");
  EXPECT_THAT(RunFolder::Claim(run, {.inputs = {run + "/ckpt/last.pt"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       absl::StrCat(run, "/ckpt/last.pt is an input of the run and a file the run "
                                         "writes (its checkpoint last.pt): move it, or give the "
                                         "run another checkpoint.dir")));
  // Resuming reads the run's own checkpoints.
  EXPECT_THAT(RunFolder::Claim(run, {.resume = true, .inputs = {run + "/ckpt/last.pt"}}), IsOk());
}

// The run folder or checkpoint folder inside a folder of the data the run reads is refused,
// before anything is made there; data in the working directory's own tree is the user's
// layout (root ".", runs/ beside the data).
TEST(RunFolderTest, FoldersInsideTheDataAreRefused) {
  const std::string data = FreshDir("cifar_root");
  fs::create_directories(data + "/cifar-10-batches-bin");
  EXPECT_THAT(RunFolder::Claim(data, {.data_folders = {data}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       absl::StrCat("run folder ", data, " is inside ", data,
                                    ", a folder of the data the run reads: give --run_dir (or "
                                    "run.run_dir, checkpoint.dir) a folder elsewhere")));
  EXPECT_FALSE(fs::exists(data + "/" + RunFolder::kLockName));
  const std::string run = FreshDir("run_beside_data");
  EXPECT_THAT(RunFolder::Claim(run, {.checkpoint_dir = data + "/cifar-10-batches-bin",
                                     .data_folders = {data}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("checkpoint folder " + data + "/cifar-10-batches-bin is inside")));
  EXPECT_FALSE(fs::exists(run));
  // A project whose data is its working directory (root "."): its runs/ folders are fine.
  const fs::path cwd = fs::current_path();
  const std::string project = FreshDir("project");
  fs::create_directories(project);
  fs::current_path(project);
  EXPECT_THAT(RunFolder::Claim(project + "/runs/kd", {.data_folders = {project}}), IsOk());
  fs::current_path(cwd);
}

// A kill between a checkpoint's write and its rename leaves <file>.tmp.<pid>; the next claim
// removes those whose writer is gone and keeps a live writer's.
TEST(RunFolderTest, StaleTemporariesAreRemoved) {
  const std::string dir = FreshDir("stale");
  const pid_t dead = ::fork();
  if (dead == 0) std::_Exit(0);
  ASSERT_GT(dead, 0);
  ::waitpid(dead, nullptr, 0);
  const std::string stale = absl::StrCat(dir, "/ckpt/last.pt.tmp.", dead);
  const std::string stale_top = absl::StrCat(dir, "/summary.json.tmp.", dead);
  const std::string live = absl::StrCat(dir, "/ckpt/best.pt.tmp.", ::getppid());
  Touch(stale);
  Touch(stale_top);
  Touch(live);
  ASSERT_THAT(RunFolder::Claim(dir), IsOk());
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists(stale_top));
  EXPECT_TRUE(fs::exists(live));
}

TEST(RunFolderTest, WhatTheRunWritesIsCheckedFirst) {
  const std::string dir = FreshDir("unwritable");
  fs::create_directories(dir);
  ASSERT_EQ(::mkfifo((dir + "/metrics.jsonl").c_str(), 0600), 0);
  EXPECT_THAT(RunFolder::Claim(dir, {.resume = true}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       absl::StrCat(dir,
                                    "/metrics.jsonl: is not a regular file; the run writes "
                                    "its metrics.jsonl there: move it away, or give another "
                                    "--run_dir")));
  const std::string file = FreshDir("a_file");
  Touch(file);
  EXPECT_THAT(
      RunFolder::Claim(file + "/run"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot create it: Not a directory")));
  const std::string ckpt_file = FreshDir("ckpt_file");
  Touch(ckpt_file + "/ckpt");
  EXPECT_THAT(RunFolder::Claim(ckpt_file),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       absl::StrCat("checkpoint folder ", ckpt_file,
                                    "/ckpt: cannot create it: Not a directory; give "
                                    "checkpoint.dir a folder")));
}

}  // namespace
}  // namespace kd
