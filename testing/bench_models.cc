#include "testing/bench_models.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "hooks/torchscript_model.h"

namespace kd {
namespace test {

absl::StatusOr<std::string> GeneratedResNet18() {
  std::string cache;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    cache = xdg;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    cache = absl::StrCat(home, "/.cache");
  } else {
    cache = "/tmp";
  }
  const std::string dir = cache + "/libkd";
  const std::string path = dir + "/resnet18.pt";
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && st.st_size > 0) return path;
  ::mkdir(cache.c_str(), 0755);
  ::mkdir(dir.c_str(), 0755);
  // Runfiles (bazel run/test) hold the script and the Python of libkd's virtual environment
  // (@libtorch//:python.sh) at these relative paths.
  const std::string command =
      absl::StrCat("external/libtorch/python.sh tests/testdata/make_fixtures.py --resnet18 '", path,
                   ".tmp' && mv '", path, ".tmp' '", path, "'");
  if (std::system(command.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "could not generate ", path, " (needs torch and torchvision in libkd's virtual "
        "environment: run tools/install_deps.sh); by hand: ", command));
  }
  return path;
}

std::unique_ptr<Model> LoadTorchScriptOrDie(const std::string& path) {
  auto model = LoadTorchScriptModel(path);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    std::exit(2);
  }
  (*model)->SetTraining(false);
  return *std::move(model);
}

}  // namespace test
}  // namespace kd
