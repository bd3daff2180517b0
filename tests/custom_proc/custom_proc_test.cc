// A process function registered by a library outside distill/ (scale_samples.cc) is found by
// the key a config gives, with the config's kwargs as defaults.
#include <string>

#include <ATen/ATen.h>

#include "testing/status_matchers.h"
#include "distill/config/config_loader.h"
#include "distill/config/config_validator.h"
#include "distill/procs/proc_func.h"
#include "distill/procs/testing/fake_training_context.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kd {
namespace {

using ::testing::Contains;
using ::testing::IsEmpty;

std::string ConfigPath() {
  return std::string(std::getenv("TEST_SRCDIR")) + "/" + std::getenv("TEST_WORKSPACE") +
         "/tests/custom_proc/scale_samples.pbtxt";
}

TEST(CustomProcTest, TheOutsideRegistrationIsListed) {
  EXPECT_THAT(ProcRegistry<PreForwardProc>().Keys(), Contains("scale_samples"));
  std::optional<RegistrationSite> site = ProcRegistry<PreForwardProc>().Site("scale_samples");
  ASSERT_TRUE(site.has_value());
  EXPECT_EQ(site->file, "tests/custom_proc/scale_samples.cc");
}

TEST(CustomProcTest, AConfigUsesItByKey) {
  absl::StatusOr<LoadedConfig> loaded = LoadConfig(ConfigPath());
  ASSERT_THAT(loaded, IsOk());
  ValidateOptions options;
  options.check_files = true;
  EXPECT_THAT(ValidateConfig(*loaded, options), IsEmpty());

  auto proc = BuildStageProcFunc<PreForwardProc>(loaded->config.train(), /*with_teacher=*/true);
  ASSERT_THAT(proc, IsOk());
  EXPECT_EQ(proc->key(), "scale_samples");
  test::FakeTrainingContext box(/*with_teacher=*/true);
  Batch batch{at::ones({2, 3}), c10::IValue(), c10::IValue()};
  ASSERT_THAT((*proc)(box, batch), IsOk());
  // The config's factor, 0.5.
  EXPECT_TRUE(at::equal(batch.samples.toTensor(), at::full({2, 3}, 0.5)));
  // A factor given at the call wins: 0.5 * 4 = 2.
  ASSERT_THAT((*proc)(box, batch, {{"factor", 4.0}}), IsOk());
  EXPECT_TRUE(at::equal(batch.samples.toTensor(), at::full({2, 3}, 2.0)));
}

}  // namespace
}  // namespace kd
