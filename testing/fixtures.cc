#include "testing/fixtures.h"

#include <cstdlib>
#include <iostream>
#include <sstream>

#include <ATen/ATen.h>

#include <torch/csrc/jit/serialization/pickle.h>

#include "base/file_util.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace test {

std::string RunfilePath(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr || workspace == nullptr) return path;
  return std::string(srcdir) + "/" + workspace + "/" + path;
}

std::string FixturePath(const std::string& name) { return RunfilePath("tests/testdata/" + name); }

c10::IValue LoadExpected(const std::string& name) {
  const std::string path = FixturePath(name + ".expected.pt");
  auto bytes = ReadFile(path);
  TORCH_CHECK(bytes.ok(), bytes.status().ToString());
  return torch::jit::pickle_load(std::vector<char>(bytes->begin(), bytes->end()));
}

c10::IValue At(const c10::IValue& dict, const std::string& key) {
  const auto& d = dict.toGenericDict();
  auto it = d.find(c10::IValue(key));
  TORCH_CHECK(it != d.end(), "no key \"", key, "\" in the expected values");
  return it->value();
}

std::vector<c10::IValue> FixtureInputs(const c10::IValue& expected) {
  return At(expected, "inputs").toTupleRef().elements().vec();
}

c10::IValue LastPythonHook(const c10::IValue& expected, const std::string& path,
                           const std::string& io_type) {
  return At(At(At(expected, "hooks"), path), io_type).toTupleRef().elements().back();
}

HookFn TapRecorder::Fn() {
  return [this](const std::vector<c10::IValue>& args, const c10::IValue& output) {
    inputs.push_back(args.size() == 1 ? args[0] : c10::ivalue::Tuple::create(args));
    outputs.push_back(output);
  };
}

namespace {


}  // namespace

bool AllClose(const c10::IValue& actual, const c10::IValue& expected, double atol) {
  std::ostringstream why;
  if (IValuesClose(actual, expected, atol, &why)) return true;
  std::cerr << why.str() << "\n";
  return false;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

}  // namespace test
}  // namespace kd
