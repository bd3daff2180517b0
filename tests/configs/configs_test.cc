// Every .pbtxt config in the repo parses and validates (files included) in a program that links
// every registry of process functions, libkd's and the test extension's. The configs come as
// arguments: see BUILD.bazel.
#include <string>
#include <vector>

#include "distill/config/config_loader.h"
#include "distill/config/config_summary.h"
#include "distill/config/config_validator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

std::vector<std::string>* configs = nullptr;

TEST(ConfigsTest, EveryConfigParsesAndValidates) {
  ASSERT_NE(configs, nullptr);
  ASSERT_GE(configs->size(), 3u);  // two examples in tools/configs, one in tests/custom_proc
  ValidateOptions options;
  options.check_files = true;
  for (const std::string& path : *configs) {
    SCOPED_TRACE(path);
    absl::StatusOr<LoadedConfig> loaded = LoadConfig(path);
    ASSERT_THAT(loaded, IsOk());
    for (const ConfigProblem& problem : ValidateConfig(*loaded, options)) {
      ADD_FAILURE() << problem.ToString();
    }
    EXPECT_FALSE(SummarizeConfig(loaded->config).empty());
  }
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  kd::configs = new std::vector<std::string>(argv + 1, argv + argc);
  return RUN_ALL_TESTS();
}
