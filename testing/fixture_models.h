// The test fixtures as kd::Models, for tests that run on both model kinds.
//
//   class MyTest : public ::testing::TestWithParam<kd::test::ModelKind> {};
//   std::unique_ptr<kd::Model> model = kd::test::SmallCnnModel(GetParam());
//   INSTANTIATE_TEST_SUITE_P(BothKinds, MyTest, kd::test::kBothKinds,
//                            kd::test::ModelKindName);
#ifndef LIBKD_TESTING_FIXTURE_MODELS_H_
#define LIBKD_TESTING_FIXTURE_MODELS_H_

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "hooks/model.h"

namespace kd {
namespace test {

enum class ModelKind { kTorchScript, kNative };

inline const auto kBothKinds = ::testing::Values(ModelKind::kTorchScript, ModelKind::kNative);

// "TorchScript" / "Native", for parameterized test names.
std::string ModelKindName(const ::testing::TestParamInfo<ModelKind>& info);

// tests/testdata/`name`.pt in eval mode; throws if it cannot be loaded.
std::unique_ptr<Model> TorchScriptFixture(const std::string& name);

// The small_cnn fixture as `kind`, with the weights Python saved for it, in eval mode: the
// TorchScript file, or the native twin (testing/small_cnn.h) loading small_cnn.state.pt.
std::unique_ptr<Model> SmallCnnModel(ModelKind kind);

}  // namespace test
}  // namespace kd

#endif  // LIBKD_TESTING_FIXTURE_MODELS_H_
