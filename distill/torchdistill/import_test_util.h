// What the importer's tests share: their YAML files, the main job's configs, and comparing
// an imported config with the config it stands for.
#ifndef LIBKD_DISTILL_TORCHDISTILL_IMPORT_TEST_UTIL_H_
#define LIBKD_DISTILL_TORCHDISTILL_IMPORT_TEST_UTIL_H_

#include <string>

#include "distill/config/distill_config.pb.h"

namespace kd {
namespace torchdistill {
namespace test {

// distill/torchdistill/testdata/<name> in the runfiles.
std::string TestData(const std::string& name);
// tools/configs/<name>, loaded (a failure fails the test).
DistillConfig Original(const std::string& name);
// `config` without its datasets' "root" kwargs (torchvision's root has no counterpart in configs
// that read Debian's files), and without a subset's stop at Fashion-MNIST's 60000 training
// images (Python's range has a stop; libkd's subset to the end does not).
DistillConfig WithoutRoots(DistillConfig config);
// The two configs are the same (datasets' kwargs in any order), else the test fails with the
// differences.
void ExpectSameConfig(const DistillConfig& imported, const DistillConfig& original);

}  // namespace test
}  // namespace torchdistill
}  // namespace kd

#endif  // LIBKD_DISTILL_TORCHDISTILL_IMPORT_TEST_UTIL_H_
