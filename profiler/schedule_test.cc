// The schedule and the traces written, against torch.profiler's own answers
// (testdata/schedule_fixture.txt, made by testdata/make_schedule_fixture.py with the Python torch
// of libkd's environment).
#include "profiler/schedule.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "profiler/profiler.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::HasSubstr;

struct Case {
  ProfilerSchedule schedule;
  std::string actions;            // N / W / R / S at steps 0..39
  std::vector<int64_t> saved_at;  // step_num at each on_trace_ready of a 30-step loop
};

std::vector<Case> ReadFixture() {
  std::ifstream in("profiler/testdata/schedule_fixture.txt");
  EXPECT_TRUE(in) << "profiler/testdata/schedule_fixture.txt";
  std::vector<Case> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    Case c;
    std::string bar;
    fields >> c.schedule.wait >> c.schedule.warmup >> c.schedule.active >> c.schedule.repeat >>
        c.schedule.skip_first >> bar >> c.actions >> bar;
    for (int64_t n; fields >> n;) c.saved_at.push_back(n);
    cases.push_back(c);
  }
  return cases;
}

char Letter(ProfilerAction action) {
  switch (action) {
    case ProfilerAction::kNone:
      return 'N';
    case ProfilerAction::kWarmup:
      return 'W';
    case ProfilerAction::kRecord:
      return 'R';
    case ProfilerAction::kRecordAndSave:
      return 'S';
  }
  return '?';
}

std::string Name(const ProfilerSchedule& s) {
  return "wait " + std::to_string(s.wait) + " warmup " + std::to_string(s.warmup) + " active " +
         std::to_string(s.active) + " repeat " + std::to_string(s.repeat) + " skip_first " +
         std::to_string(s.skip_first);
}

TEST(ScheduleTest, ActionsAreTorchProfilerSchedules) {
  const std::vector<Case> cases = ReadFixture();
  ASSERT_EQ(cases.size(), 7u);
  for (const Case& c : cases) {
    ASSERT_THAT(ValidateSchedule(c.schedule), IsOk());
    std::string actions;
    for (int64_t step = 0; step < static_cast<int64_t>(c.actions.size()); ++step) {
      actions += Letter(ScheduleAction(c.schedule, step));
    }
    EXPECT_EQ(actions, c.actions) << Name(c.schedule);
  }
}

// A loop of 30 steps inside the profiler writes a trace exactly where torch.profiler.profile
// calls on_trace_ready (repeat 0 included, and the trace saved at the exit of an open window).
TEST(ScheduleTest, TracesAreWrittenWhereTorchProfilerSavesThem) {
  const std::filesystem::path root = std::filesystem::path(::testing::TempDir()) / "schedules";
  int i = 0;
  for (const Case& c : ReadFixture()) {
    const std::string dir = (root / std::to_string(i++)).string();
    std::vector<int64_t> saved_at;
    {
      absl::StatusOr<std::unique_ptr<Profiler>> profiler =
          CreateProfiler({.output_dir = dir, .schedule = c.schedule});
      ASSERT_THAT(profiler, IsOk());
      at::Tensor x = at::ones({4, 4});
      for (int step = 0; step < 30; ++step) {
        x = at::mm(x, x);
        ASSERT_THAT((*profiler)->Step(), IsOk());
      }
      ASSERT_THAT((*profiler)->Stop(), IsOk());
      for (const std::string& path : (*profiler)->traces()) {
        const std::string name = std::filesystem::path(path).filename().string();
        ASSERT_THAT(name, ::testing::MatchesRegex("trace_step_[0-9]+\\.json"));
        saved_at.push_back(std::stoll(name.substr(11)));
        EXPECT_TRUE(std::filesystem::exists(path)) << path;
      }
    }
    EXPECT_EQ(saved_at, c.saved_at) << Name(c.schedule);
  }
}

TEST(ScheduleTest, BadValuesAreNamed) {
  EXPECT_THAT(ValidateSchedule({.wait = -1, .active = 0}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "invalid profiler schedule: wait=-1 (need >= 0), active=0 (need > 0)"));
  EXPECT_THAT(CreateProfiler({.output_dir = ::testing::TempDir(), .schedule = {.repeat = -2}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("repeat=-2 (need >= 0)")));
}

TEST(ScheduleTest, UnusableDirectoryIsAClearError) {
  const std::string file = (std::filesystem::path(::testing::TempDir()) / "a_file").string();
  std::ofstream(file) << "x";
  EXPECT_THAT(CreateProfiler({.output_dir = file + "/traces"}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("cannot create the trace directory " + file + "/traces")));
  EXPECT_THAT(CreateProfiler({}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("output_dir is required")));
}

TEST(ScheduleTest, StepAfterStopIsRefused) {
  absl::StatusOr<std::unique_ptr<Profiler>> profiler = CreateProfiler(
      {.output_dir = (std::filesystem::path(::testing::TempDir()) / "stopped").string()});
  ASSERT_THAT(profiler, IsOk());
  ASSERT_THAT((*profiler)->Stop(), IsOk());
  EXPECT_THAT((*profiler)->Step(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_TRUE((*profiler)->traces().empty());  // wait 20: nothing recorded in step 0
}

// The writability probe is a new file of the process's own: a link or a FIFO planted under
// its name is neither written through (a user's file was truncated) nor waited on (a FIFO
// hung the run), and nothing is made in /dev.
TEST(ProfilerTest, TheProbeIsNeverWrittenThroughOrWaitedOn) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "probe";
  std::filesystem::create_directories(dir);
  const std::filesystem::path victim = dir.parent_path() / "victim.txt";
  std::ofstream(victim) << "kept";
  const std::filesystem::path probe = dir / (".libkd_probe." + std::to_string(::getpid()));
  std::filesystem::create_symlink(victim, probe);
  EXPECT_THAT(CreateProfiler({.output_dir = dir.string()}).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("cannot write in")));
  std::ifstream in(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "kept");
  std::filesystem::remove(probe);
  ASSERT_EQ(::mkfifo(probe.c_str(), 0600), 0);
  EXPECT_THAT(CreateProfiler({.output_dir = dir.string()}).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("cannot write in")));
  EXPECT_THAT(CreateProfiler({.output_dir = "/dev/shm/libkd_profiler_test"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(": is in /dev, ")));
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/libkd_profiler_test"));
}

}  // namespace
}  // namespace kd
