// The fixture of the config validator's tests: stand-in plugins of every kind a config names
// (registered when this library is linked), a valid config as lines, and helpers that break one
// line of it and validate the result.
#ifndef LIBKD_DISTILL_CONFIG_TESTING_VALIDATOR_TEST_FIXTURE_H_
#define LIBKD_DISTILL_CONFIG_TESTING_VALIDATOR_TEST_FIXTURE_H_

#include <string>
#include <vector>

#include "distill/config/config_validator.h"

namespace kd {
namespace test {

using Lines = std::vector<std::string>;

// A valid config (run, two datasets, a TorchScript teacher, a native student, one stage with
// hooks on "layer2", SGD, MultiStepLR, a KD and a hint term, accuracy); the cases break one
// thing in it. Line N is kBase[N - 1]; the .cc numbers the lines.
extern const Lines kBase;

// `lines` with line `n` (1-based) replaced by `with` (several lines, or none).
Lines Replace(Lines lines, int n, const Lines& with);

// `lines` with `more` inserted before line `n`.
Lines Insert(Lines lines, int n, const Lines& more);

// "t.pbtxt:<n>:<column of the `occurrence`-th needle in line n>: ": where the test expects a
// message, found by searching the test's own text.
std::string At(const Lines& lines, int n, const std::string& needle, int occurrence = 1);

// The problems of `lines` (parsed as "t.pbtxt"), as ConfigProblem::ToString words them.
std::vector<std::string> Validate(const Lines& lines, const ValidateOptions& options = {});

}  // namespace test
}  // namespace kd

#endif  // LIBKD_DISTILL_CONFIG_TESTING_VALIDATOR_TEST_FIXTURE_H_
