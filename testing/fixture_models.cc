#include "testing/fixture_models.h"

#include "hooks/native_model.h"
#include "hooks/torchscript_model.h"
#include "testing/small_cnn.h"
#include "testing/fixtures.h"

namespace kd {
namespace test {

std::string ModelKindName(const ::testing::TestParamInfo<ModelKind>& info) {
  return info.param == ModelKind::kTorchScript ? "TorchScript" : "Native";
}

std::unique_ptr<Model> TorchScriptFixture(const std::string& name) {
  auto model = LoadTorchScriptModel(FixturePath(name + ".pt"));
  TORCH_CHECK(model.ok(), model.status().ToString());
  (*model)->SetTraining(false);
  return *std::move(model);
}

std::unique_ptr<Model> SmallCnnModel(ModelKind kind) {
  if (kind == ModelKind::kTorchScript) return TorchScriptFixture("small_cnn");
  std::unique_ptr<Model> model = MakeNativeModel(SmallCnn().ptr());
  absl::Status loaded = model->LoadState(FixturePath("small_cnn.state.pt"));
  TORCH_CHECK(loaded.ok(), loaded.ToString());
  model->SetTraining(false);
  return model;
}

}  // namespace test
}  // namespace kd
