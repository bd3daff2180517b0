// Large benchmark models, generated on first use by make_fixtures.py (not committed).
//
//   absl::StatusOr<std::string> path = kd::test::GeneratedResNet18();
#ifndef LIBKD_TESTING_BENCH_MODELS_H_
#define LIBKD_TESTING_BENCH_MODELS_H_

#include <string>

#include <memory>

#include "absl/status/statusor.h"
#include "hooks/model.h"

namespace kd {
namespace test {

// A scripted torchvision ResNet-18 (random weights, ~45 MB) in the user's cache folder
// ($XDG_CACHE_HOME or ~/.cache, /libkd/resnet18.pt), made with Debian's python3-torch and
// python3-torchvision the first time. Errors say how to make it by hand.
absl::StatusOr<std::string> GeneratedResNet18();

// The TorchScript model at `path` in eval mode; prints the error and exits 2 if it cannot be
// loaded (benchmarks have no one to return a status to).
std::unique_ptr<Model> LoadTorchScriptOrDie(const std::string& path);

}  // namespace test
}  // namespace kd

#endif  // LIBKD_TESTING_BENCH_MODELS_H_
