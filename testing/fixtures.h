// Test access to the fixtures in tests/testdata (pass //tests/testdata:fixtures as data).
//
//   std::string path = kd::test::FixturePath("small_cnn.pt");
//   c10::IValue expected = kd::test::LoadExpected("small_cnn");  // small_cnn.expected.pt
#ifndef LIBKD_TESTING_FIXTURES_H_
#define LIBKD_TESTING_FIXTURES_H_

#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "hooks/model.h"

namespace kd {
namespace test {

// The runfiles path of `path`, relative to the workspace root (a file in the test's `data`).
std::string RunfilePath(const std::string& path);

// The runfiles path of tests/testdata/`name`.
std::string FixturePath(const std::string& name);

// torch.load of tests/testdata/`name`.expected.pt (see make_fixtures.py); throws on error.
c10::IValue LoadExpected(const std::string& name);

// Looks up `key` in a dict with string keys; throws naming the key if absent.
c10::IValue At(const c10::IValue& dict, const std::string& key);

// The forward arguments Python used: expected["inputs"] as a vector.
std::vector<c10::IValue> FixtureInputs(const c10::IValue& expected);

// The last call Python's hook recorded for `path`: expected["hooks"][path][io_type][-1].
c10::IValue LastPythonHook(const c10::IValue& expected, const std::string& path,
                           const std::string& io_type);

// Records every call of a tap, torchdistill-style (a single argument unwrapped).
struct TapRecorder {
  std::vector<c10::IValue> inputs, outputs;
  HookFn Fn();
};

// Whether two values are equal structurally with tensors allclose (rtol 0, atol `atol`):
// tensors, tuples and lists (compared element-wise; a tuple equals a list of the same values),
// and scalars. Prints the first difference to stderr.
bool AllClose(const c10::IValue& actual, const c10::IValue& expected, double atol = 1e-5);

// A file in the test's temporary folder.
std::string TempPath(const std::string& name);

}  // namespace test
}  // namespace kd

#endif  // LIBKD_TESTING_FIXTURES_H_
