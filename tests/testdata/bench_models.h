// Large benchmark models, generated on first use by make_fixtures.py (not committed).
//
//   absl::StatusOr<std::string> path = kd::testing::GeneratedResNet18();
#ifndef LIBKD_TESTS_TESTDATA_BENCH_MODELS_H_
#define LIBKD_TESTS_TESTDATA_BENCH_MODELS_H_

#include <string>

#include "absl/status/statusor.h"

namespace kd {
namespace testing {

// A scripted torchvision ResNet-18 (random weights, ~45 MB) in the user's cache folder
// ($XDG_CACHE_HOME or ~/.cache, /libkd/resnet18.pt), made with Debian's python3-torch and
// python3-torchvision the first time. Errors say how to make it by hand.
absl::StatusOr<std::string> GeneratedResNet18();

}  // namespace testing
}  // namespace kd

#endif  // LIBKD_TESTS_TESTDATA_BENCH_MODELS_H_
