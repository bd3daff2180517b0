#include "tools/run_report.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <iostream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  const fs::path dir = fs::path(std::getenv("TEST_TMPDIR")) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

int64_t FolderBytes(const std::string& dir) {
  int64_t bytes = 0;
  for (const auto& entry : fs::directory_iterator(dir)) bytes += entry.file_size();
  return bytes;
}

// A disk that fills mid-run: the event file may not grow past what it holds after the config
// (RLIMIT_FSIZE makes write(2) fail with EFBIG, as ENOSPC would on a full disk). The step and
// epoch reports write several scalars each; the first failure turns TensorBoard off and the
// ones after it must not touch the writer (this crashed: the writer was reset, then used).
TEST(ReporterTest, AFullDiskTurnsTensorboardOffAndTheRunGoesOn) {
  const std::string run_dir = TempDir("full_disk");
  const std::string tb_dir = run_dir + "/tb";
  Reporter reporter(run_dir, "test");
  ASSERT_THAT(reporter.EnableTensorboard(tb_dir, "train { num_epochs: 1 }"), IsOk());
  const int64_t after_config = FolderBytes(tb_dir);
  ASSERT_GT(after_config, 0);

  struct sigaction ignore {}, old {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGXFSZ, &ignore, &old), 0);
  struct rlimit limit {}, saved {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  limit = saved;
  // metrics.jsonl (an ofstream, already written by nothing) may stay under the limit as well:
  // what is checked is that no write reaches the event file and nothing crashes.
  limit.rlim_cur = static_cast<rlim_t>(after_config);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);

  // stderr into a pipe (gtest's capture writes a file, which the limit would cut).
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const int saved_stderr = dup(STDERR_FILENO);
  ASSERT_EQ(dup2(pipe_fds[1], STDERR_FILENO), STDERR_FILENO);
  StepReport step;
  step.stage = "kd";
  step.epoch = 1;
  step.step = 1;
  step.steps_per_epoch = 2;
  step.loss = 1.5;
  step.terms = {{"a", 1.0}, {"b", 0.5}};
  reporter.Step(step);
  step.step = 2;
  reporter.Step(step);
  EpochReport epoch;
  epoch.stage = "kd";
  epoch.epoch = 1;
  epoch.num_epochs = 1;
  epoch.metrics = {{"accuracy", 0.5}};
  reporter.Epoch(epoch);
  std::cerr.flush();
  ASSERT_EQ(dup2(saved_stderr, STDERR_FILENO), STDERR_FILENO);
  close(pipe_fds[1]);
  std::string err;
  char buffer[4096];
  for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof(buffer))) > 0;) err.append(buffer, n);
  close(pipe_fds[0]);

  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &saved), 0);
  ASSERT_EQ(sigaction(SIGXFSZ, &old, nullptr), 0);
  EXPECT_THAT(err, testing::HasSubstr("test: TensorBoard events left off: "));
  // Said once, not once per scalar.
  EXPECT_EQ(err.find("left off"), err.rfind("left off"));
  EXPECT_EQ(FolderBytes(tb_dir), after_config);
  // The epoch line still reaches the terminal after the writer is gone.
  EXPECT_THAT(err, testing::HasSubstr("test kd epoch 1/1"));
}

}  // namespace
}  // namespace kd
