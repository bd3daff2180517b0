#include <algorithm>
#include <cstdlib>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/registry.h"
#include "base/torch_file.h"
#include "distill/models/model_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hooks/model.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Eq;
using ::testing::IsSupersetOf;
using ::testing::Not;
using ::testing::UnorderedElementsAreArray;

// Parameter counts by hand, layer by layer (the formulas of the papers' architectures).
int64_t Conv(int64_t in, int64_t out, int64_t k, bool bias = false) {
  return in * out * k * k + (bias ? out : 0);
}
int64_t Bn(int64_t c) { return 2 * c; }
int64_t Linear(int64_t in, int64_t out) { return in * out + out; }

int64_t MlpParams(int64_t in, const std::vector<int64_t>& hidden, int64_t classes) {
  int64_t n = 0;
  for (int64_t h : hidden) {
    n += Linear(in, h);
    in = h;
  }
  return n + Linear(in, classes);
}

int64_t LeNet5Params(int64_t in_channels, int64_t classes) {
  return Conv(in_channels, 6, 5, true) + Conv(6, 16, 5, true) + Linear(400, 120) +
         Linear(120, 84) + Linear(84, classes);
}

int64_t FashionCnnParams(int64_t w, int64_t in_channels, int64_t classes) {
  return Conv(in_channels, w, 3) + Bn(w) + Conv(w, w, 3) + Bn(w) + Conv(w, 2 * w, 3) +
         Bn(2 * w) + Conv(2 * w, 2 * w, 3) + Bn(2 * w) + Linear(2 * w * 7 * 7, classes);
}

// CIFAR ResNet of depth 6n + 2; `projection`: option B shortcuts (1x1 conv + BN), else A (none).
int64_t ResNetParams(int64_t depth, int64_t classes, int64_t in_channels, bool projection) {
  const int64_t n = (depth - 2) / 6;
  int64_t total = Conv(in_channels, 16, 3) + Bn(16) + Linear(64, classes);
  int64_t in = 16;
  for (int64_t planes : {16, 32, 64}) {
    for (int64_t i = 0; i < n; ++i) {
      total += Conv(in, planes, 3) + Bn(planes) + Conv(planes, planes, 3) + Bn(planes);
      if (in != planes && projection) total += Conv(in, planes, 1) + Bn(planes);
      in = planes;
    }
  }
  return total;
}

int64_t WrnParams(int64_t depth, int64_t k, int64_t classes, int64_t in_channels) {
  const int64_t n = (depth - 4) / 6;
  int64_t total = Conv(in_channels, 16, 3);
  int64_t in = 16;
  for (int64_t planes : {16 * k, 32 * k, 64 * k}) {
    for (int64_t i = 0; i < n; ++i) {
      total += Bn(in) + Conv(in, planes, 3) + Bn(planes) + Conv(planes, planes, 3);
      if (in != planes) total += Conv(in, planes, 1);
      in = planes;
    }
  }
  return total + Bn(in) + Linear(in, classes);
}

// Deeper nets run on 16x16 inputs to keep the test fast: global average pooling takes any size.
struct ModelCase {
  std::string name;
  std::string key;
  Kwargs kwargs;
  std::vector<int64_t> input;   // shape
  std::vector<int64_t> output;  // shape
  int64_t params = 0;
};

void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.name; }

std::vector<ModelCase> Cases() {
  return {
      {"mlp", "mlp", {{"in_features", 784}}, {2, 1, 28, 28}, {2, 10},
       MlpParams(784, {256, 128}, 10)},
      {"mlp_linear", "mlp",
       {{"in_features", 12}, {"hidden", c10::List<int64_t>()}, {"num_classes", 3}},
       {2, 12}, {2, 3}, 39},
      {"mlp_dropout", "mlp",
       {{"in_features", 6}, {"hidden", c10::List<int64_t>({5, 7})}, {"dropout", 0.5}},
       {3, 2, 3}, {3, 10}, MlpParams(6, {5, 7}, 10)},
      // The classic count for LeNet-5 with 10 classes.
      {"lenet5", "lenet5", {}, {2, 1, 28, 28}, {2, 10}, 61706},
      {"lenet5_rgb_100", "lenet5", {{"in_channels", 3}, {"num_classes", 100}}, {2, 3, 28, 28},
       {2, 100}, LeNet5Params(3, 100)},
      {"fashion_cnn", "fashion_cnn", {}, {2, 1, 28, 28}, {2, 10}, FashionCnnParams(16, 1, 10)},
      {"fashion_cnn_w4", "fashion_cnn", {{"width", 4}}, {2, 1, 28, 28}, {2, 10},
       FashionCnnParams(4, 1, 10)},
      {"fashion_cnn_rgb", "fashion_cnn",
       {{"width", 8}, {"in_channels", 3}, {"num_classes", 5}, {"dropout", 0.25}},
       {2, 3, 28, 28}, {2, 5}, FashionCnnParams(8, 3, 5)},
      // The counts torchdistill 1.1.5's resnet20/32/44/56/110/1202 (option B shortcuts) have for
      // 10 classes, quoted as the networks' sizes in KD papers and repos.
      {"resnet20", "resnet20", {}, {2, 3, 32, 32}, {2, 10}, 272474},
      {"resnet32", "resnet32", {}, {2, 3, 16, 16}, {2, 10}, 466906},
      {"resnet44", "resnet44", {}, {2, 3, 16, 16}, {2, 10}, 661338},
      {"resnet56", "resnet56", {}, {2, 3, 16, 16}, {2, 10}, 855770},
      {"resnet110", "resnet110", {}, {2, 3, 8, 8}, {2, 10}, 1730714},
      // Option A: akamaster/pytorch_resnet_cifar10's counts (resnet20: 269,722).
      {"resnet20_zero_pad", "resnet20", {{"shortcut", "zero_pad"}}, {2, 3, 16, 16}, {2, 10},
       269722},
      {"resnet32_zero_pad", "resnet32", {{"shortcut", "zero_pad"}}, {2, 3, 16, 16}, {2, 10},
       464154},
      {"resnet56_zero_pad", "resnet56", {{"shortcut", "zero_pad"}}, {2, 3, 16, 16}, {2, 10},
       853018},
      {"resnet20_grey_100", "resnet20", {{"num_classes", 100}, {"in_channels", 1}},
       {2, 1, 16, 16}, {2, 100}, ResNetParams(20, 100, 1, true)},
      // torchdistill 1.1.5's wide_resnet(depth, k, 0.0, 10, ...) counts.
      {"wrn", "wrn", {}, {2, 3, 32, 32}, {2, 10}, 2748890},
      {"wrn_40_2", "wrn", {{"depth", 40}, {"widen_factor", 2}}, {2, 3, 16, 16}, {2, 10},
       2243546},
      {"wrn_16_2", "wrn", {{"widen_factor", 2}}, {2, 3, 16, 16}, {2, 10}, 691674},
      {"wrn_10_1_dropout", "wrn",
       {{"depth", 10}, {"widen_factor", 1}, {"dropout", 0.3}, {"num_classes", 4},
        {"in_channels", 1}},
       {2, 1, 16, 16}, {2, 4}, WrnParams(10, 1, 4, 1)},
      // torchdistill 1.1.5's DenseNet-BC counts (its densenet_bc_k12_depth100(num_classes)).
      {"densenet_bc_k12_depth100", "densenet_bc_k12_depth100", {}, {2, 3, 32, 32}, {2, 10},
       769162},
      {"densenet_bc_k12_depth100_c100", "densenet_bc_k12_depth100", {{"num_classes", 100}},
       {2, 3, 16, 16}, {2, 100}, 800032},
      // torchvision 0.29's counts for 10 classes.
      {"resnet18_tv", "resnet18", {{"num_classes", 10}}, {2, 3, 32, 32}, {2, 10}, 11181642},
      {"resnet50_tv", "resnet50", {{"num_classes", 10}}, {2, 3, 32, 32}, {2, 10}, 23528522},
      {"alexnet", "alexnet", {{"num_classes", 10}}, {2, 3, 64, 64}, {2, 10}, 57044810},
      {"mobilenet_v2", "mobilenet_v2", {{"num_classes", 10}}, {2, 3, 32, 32}, {2, 10}, 2236682},
      {"mobilenet_v3_large", "mobilenet_v3_large", {{"num_classes", 10}}, {2, 3, 32, 32},
       {2, 10}, 4214842},
      {"mobilenet_v3_small", "mobilenet_v3_small", {{"num_classes", 10}}, {2, 3, 32, 32},
       {2, 10}, 1528106},
      {"efficientnet_b0", "efficientnet_b0", {{"num_classes", 10}}, {2, 3, 32, 32}, {2, 10},
       4020358},
      // Without the auxiliary classifier, whose 5x5 convolution needs 299x299 input.
      {"inception_v3", "inception_v3", {{"num_classes", 10}, {"aux_logits", false}},
       {2, 3, 75, 75}, {2, 10}, 21806058},
  };
}

class ModelZooTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  std::unique_ptr<Model> Make() {
    absl::StatusOr<std::unique_ptr<Model>> model =
        MakeRegisteredModel(GetParam().key, GetParam().kwargs);
    EXPECT_THAT(model, IsOk());
    return model.ok() ? *std::move(model) : nullptr;
  }
  at::Tensor Input() { return at::randn(GetParam().input); }
};

TEST_P(ModelZooTest, OutputShape) {
  at::manual_seed(0);
  std::unique_ptr<Model> model = Make();
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->kind(), "native");
  EXPECT_TRUE(model->is_training());
  at::Tensor out = model->Forward({Input()}).toTensor();
  EXPECT_THAT(out.sizes(), ElementsAreArray(GetParam().output));
}

TEST_P(ModelZooTest, ParameterCount) {
  std::unique_ptr<Model> model = Make();
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->NumParameters(), GetParam().params);
}

// The hook-point rule holds: a hook on every module path (the root too) fires in one forward.
TEST_P(ModelZooTest, EveryModulePathIsHookable) {
  at::manual_seed(0);
  std::unique_ptr<Model> model = Make();
  ASSERT_NE(model, nullptr);
  std::map<std::string, int> calls;
  std::vector<HookHandle> handles;
  for (const ModuleInfo& module : model->NamedModules()) {
    // (torchvision calls an MBConv's stochastic_depth on its residual blocks only.)
    if (absl::EndsWith(module.path, ".stochastic_depth")) continue;
    absl::StatusOr<HookHandle> handle = model->AddHook(
        module.path, [&calls, path = module.path](const std::vector<c10::IValue>&,
                                                  const c10::IValue&) { ++calls[path]; });
    ASSERT_THAT(handle, IsOk()) << module.path;
    calls[module.path] = 0;
    handles.push_back(*std::move(handle));
  }
  model->Forward({Input()});
  EXPECT_THAT(model->CheckHooksFired(), IsOk());
  std::vector<std::string> never;
  for (const auto& [path, n] : calls) {
    if (n == 0) never.push_back(path.empty() ? "(root)" : path);
  }
  EXPECT_THAT(never, ElementsAre()) << "of " << calls.size() << " modules";
}

// In eval mode batch norms use their running statistics and dropout is off: equal outputs.
TEST_P(ModelZooTest, EvalIsDeterministic) {
  at::manual_seed(0);
  std::unique_ptr<Model> model = Make();
  ASSERT_NE(model, nullptr);
  model->SetTraining(false);
  EXPECT_FALSE(model->is_training());
  const at::Tensor x = Input();
  const at::Tensor first = model->Forward({x}).toTensor();
  const at::Tensor second = model->Forward({x}).toTensor();
  EXPECT_TRUE(at::equal(first, second));
}

INSTANTIATE_TEST_SUITE_P(Models, ModelZooTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

// resnet1202 apart: its 600 blocks' activations overflow at initialization (as torchdistill's
// do), so the zoo's forward checks do not apply; its size does.
// The larger DenseNet-BC nets: torchdistill 1.1.5's counts for 10 and 100 classes.
TEST(ModelRegistryTest, LargeDenseNetsHaveTorchdistillsSizes) {
  for (const auto& [key, classes, params] :
       std::vector<std::tuple<std::string, int64_t, int64_t>>{
           {"densenet_bc_k24_depth250", 10, 15324406},
           {"densenet_bc_k24_depth250", 100, 15480556},
           {"densenet_bc_k40_depth190", 10, 25624430},
           {"densenet_bc_k40_depth190", 100, 25821620}}) {
    SCOPED_TRACE(absl::StrCat(key, " ", classes));
    absl::StatusOr<std::unique_ptr<Model>> model =
        MakeRegisteredModel(key, {{"num_classes", classes}});
    ASSERT_THAT(model, IsOk());
    EXPECT_EQ((*model)->NumParameters(), params);
  }
}

// torchvision's ImageNet classifiers at their 1000 classes: torchvision 0.29's counts.
TEST(ModelRegistryTest, TorchvisionModelsHaveTorchvisionsSizes) {
  for (const auto& [key, params] : std::vector<std::pair<std::string, int64_t>>{
           {"resnet18", 11689512},
           {"resnet34", 21797672},
           {"resnet50", 25557032},
           {"resnet101", 44549160},
           {"resnet152", 60192808},
           {"wide_resnet50_2", 68883240},
           {"wide_resnet101_2", 126886696},
           {"densenet121", 7978856},
           {"densenet161", 28681000},
           {"densenet169", 14149480},
           {"densenet201", 20013928},
           {"alexnet", 61100840},
           {"mobilenet_v2", 3504872},
           {"mobilenet_v3_large", 5483032},
           {"mobilenet_v3_small", 2542856},
           {"efficientnet_b0", 5288548},
           {"efficientnet_b1", 7794184},
           {"efficientnet_b2", 9109994},
           {"efficientnet_b3", 12233232},
           {"efficientnet_b4", 19341616},
           {"efficientnet_b5", 30389784},
           {"efficientnet_b6", 43040704},
           {"efficientnet_b7", 66347960},
           {"inception_v3", 27161264}}) {
    SCOPED_TRACE(key);
    absl::StatusOr<std::unique_ptr<Model>> model = MakeRegisteredModel(key, {});
    ASSERT_THAT(model, IsOk());
    EXPECT_EQ((*model)->NumParameters(), params);
  }
  absl::StatusOr<std::unique_ptr<Model>> zeroed =
      MakeRegisteredModel("resnet18", {{"zero_init_residual", true}});
  ASSERT_THAT(zeroed, IsOk());
  for (const auto& [name, p] : (*zeroed)->NamedParameters()) {
    if (absl::EndsWith(name, "bn2.weight") && absl::StartsWith(name, "layer")) {
      EXPECT_TRUE(at::equal(p, at::zeros_like(p))) << name;
    }
  }
}

// torchvision's DenseNet weight files keep the dense layers' first names ("norm.1", "conv.2");
// they load as torchvision's _load_state_dict renames them.
TEST(ModelRegistryTest, TorchvisionsLegacyDenseNetNamesLoad) {
  absl::StatusOr<std::unique_ptr<Model>> source =
      MakeRegisteredModel("densenet121", {{"num_classes", 10}});
  absl::StatusOr<std::unique_ptr<Model>> target =
      MakeRegisteredModel("densenet121", {{"num_classes", 10}});
  ASSERT_THAT(source, IsOk());
  ASSERT_THAT(target, IsOk());
  // As torchvision's files: the first names, and no num_batches_tracked (older than it).
  c10::Dict<std::string, at::Tensor> legacy;
  int renamed = 0;
  for (const auto& tensors : {(*source)->NamedParameters(), (*source)->NamedBuffers()}) {
    for (const auto& [name, t] : tensors) {
      if (absl::EndsWith(name, ".num_batches_tracked")) continue;
      std::string file_name = name;
      for (const char* part : {".norm1.", ".norm2.", ".conv1.", ".conv2."}) {
        if (absl::StrContains(name, "denselayer") && absl::StrContains(name, part)) {
          const std::string dotted = absl::StrCat(".", std::string(part + 1, 4), ".",
                                                  std::string(part + 5, 1), ".");
          file_name = absl::StrReplaceAll(name, {{part, dotted}});
          ++renamed;
        }
      }
      legacy.insert(file_name, t);
    }
  }
  ASSERT_TRUE(legacy.contains("features.denseblock1.denselayer1.norm.1.running_var"));
  EXPECT_EQ(renamed, 58 * 10);  // 58 dense layers: two batch norms (4 tensors each), two convs
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/densenet121_legacy.pth");
  ASSERT_THAT(WriteTorchFile(path, legacy), IsOk());
  ASSERT_THAT((*target)->LoadState(path), IsOk());
  std::map<std::string, at::Tensor> loaded;
  for (const auto& [name, t] : (*target)->NamedParameters()) loaded[name] = t;
  for (const auto& [name, t] : (*source)->NamedParameters()) {
    EXPECT_TRUE(at::equal(loaded[name], t)) << name;
  }
}

// HND/GHND's students: the sizes, state-dict names and children of torchdistill's in-package
// definitions (run with torchvision 0.29 at 1000 classes), and sc2-benchmark's names.
TEST(ModelRegistryTest, HndStudentsAreTorchdistills) {
  struct Case {
    std::string key;
    int64_t params;
    size_t state_entries;
    std::string first, children;
  };
  for (const Case& c : std::vector<Case>{
           {"custom_resnet152", 60813760, 752, "bottleneck.encoder.0.weight",
            "bottleneck layer3 layer4 avgpool flatten fc"},
           {"custom_densenet169", 14857408, 823, "features.bottleneck.encoder.0.weight",
            "features relu adaptive_avgpool classifier"},
           {"custom_densenet201", 20721856, 1015, "features.bottleneck.encoder.0.weight",
            "features relu adaptive_avgpool classifier"},
           {"custom_inception_v3", 24146720, 566, "bottleneck.encoder.0.weight",
            "bottleneck Mixed_5b Mixed_5c Mixed_5d Mixed_6a Mixed_6b Mixed_6c Mixed_6d Mixed_6e "
            "Mixed_7a Mixed_7b Mixed_7c adaptive_avgpool dropout flatten fc"}}) {
    SCOPED_TRACE(c.key);
    absl::StatusOr<std::unique_ptr<Model>> model = MakeRegisteredModel(c.key, {});
    ASSERT_THAT(model, IsOk());
    EXPECT_EQ((*model)->NumParameters(), c.params);
    std::vector<std::string> state;
    for (const auto& tensors : {(*model)->NamedParameters(), (*model)->NamedBuffers()}) {
      for (const auto& [name, t] : tensors) state.push_back(name);
    }
    EXPECT_EQ(state.size(), c.state_entries);
    EXPECT_THAT(state, Contains(c.first));
    std::vector<std::string> children;
    for (const ModuleInfo& m : (*model)->NamedModules()) {
      if (!m.path.empty() && m.path.find('.') == std::string::npos) children.push_back(m.path);
    }
    EXPECT_EQ(absl::StrJoin(children, " "), c.children);
  }
  absl::StatusOr<std::unique_ptr<Model>> sc2bench =
      MakeRegisteredModel("custom_inception_v3", {{"naming", "sc2bench"}});
  ASSERT_THAT(sc2bench, IsOk());
  std::vector<std::string> children;
  for (const ModuleInfo& m : (*sc2bench)->NamedModules()) {
    if (!m.path.empty() && m.path.find('.') == std::string::npos) children.push_back(m.path);
  }
  EXPECT_EQ(absl::StrJoin(children, " "), "bottleneck_layer inception_modules avgpool dropout fc");
  EXPECT_THAT(
      MakeRegisteredModel("custom_resnet152",
                          {{"short_module_names", c10::List<std::string>({"layer5"})}}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("short_module_names: \"layer5\" is not a child of the original "
                         "model (conv1, bn1, relu, maxpool, layer1, layer2, layer3, layer4, "
                         "avgpool, fc)")));
}

// torchvision's memory_efficient: the bottlenecks recomputed in backward give the same output and
// gradients; norm1 then sees the batch twice, as torchvision's checkpoint does (its running mean
// 0.19 of the batch mean rather than 0.1, two batches counted).
TEST(ModelRegistryTest, MemoryEfficientDenseNetsRecomputeAsTorchvision) {
  at::manual_seed(0);
  absl::StatusOr<std::unique_ptr<Model>> plain =
      MakeRegisteredModel("densenet_bc_k12_depth100", {});
  absl::StatusOr<std::unique_ptr<Model>> efficient =
      MakeRegisteredModel("densenet_bc_k12_depth100", {{"memory_efficient", true}});
  ASSERT_THAT(plain, IsOk());
  ASSERT_THAT(efficient, IsOk());
  std::map<std::string, at::Tensor> source;
  for (const auto& [name, t] : (*plain)->NamedParameters()) source[name] = t;
  {
    at::NoGradGuard no_grad;
    for (auto& [name, t] : (*efficient)->NamedParameters()) t.copy_(source[name]);
  }
  const at::Tensor x = at::randn({2, 3, 32, 32});
  const at::Tensor a = (*plain)->Forward({x}).toTensor();
  const at::Tensor b = (*efficient)->Forward({x}).toTensor();
  EXPECT_TRUE(at::allclose(a, b, 1e-5, 1e-6));
  a.square().sum().backward();
  b.square().sum().backward();
  std::map<std::string, at::Tensor> grads;
  for (const auto& [name, t] : (*plain)->NamedParameters()) grads[name] = t.grad();
  for (const auto& [name, t] : (*efficient)->NamedParameters()) {
    ASSERT_TRUE(t.grad().defined()) << name;
    EXPECT_TRUE(at::allclose(t.grad(), grads[name], 1e-4, 1e-6)) << name;
  }
  std::map<std::string, at::Tensor> plain_buffers, efficient_buffers;
  for (const auto& [name, t] : (*plain)->NamedBuffers()) plain_buffers[name] = t;
  for (const auto& [name, t] : (*efficient)->NamedBuffers()) efficient_buffers[name] = t;
  const std::string norm1 = "features.denseblock1.denselayer2.norm1.";
  EXPECT_TRUE(at::allclose(efficient_buffers[norm1 + "running_mean"],
                           plain_buffers[norm1 + "running_mean"] * 1.9, 1e-4, 1e-6));
  EXPECT_EQ(efficient_buffers[norm1 + "num_batches_tracked"].item<int64_t>(), 2);
  EXPECT_EQ(plain_buffers[norm1 + "num_batches_tracked"].item<int64_t>(), 1);
  EXPECT_EQ(efficient_buffers["features.denseblock1.denselayer2.norm2.num_batches_tracked"]
                .item<int64_t>(),
            1);
}

TEST(ModelRegistryTest, Resnet1202HasTorchdistillsSize) {
  absl::StatusOr<std::unique_ptr<Model>> model = MakeRegisteredModel("resnet1202");
  ASSERT_THAT(model, IsOk());
  EXPECT_EQ((*model)->NumParameters(), 19424026);
}

TEST(ModelRegistryTest, EveryModelIsRegistered) {
  EXPECT_THAT(
      ModelRegistry().Keys(),
      ElementsAre("alexnet", "custom_densenet169", "custom_densenet201", "custom_inception_v3",
                  "custom_resnet152", "densenet121", "densenet161", "densenet169", "densenet201",
                  "densenet_bc_k12_depth100", "densenet_bc_k24_depth250",
                  "densenet_bc_k40_depth190", "efficientnet_b0", "efficientnet_b1",
                  "efficientnet_b2", "efficientnet_b3", "efficientnet_b4", "efficientnet_b5",
                  "efficientnet_b6", "efficientnet_b7", "fashion_cnn", "gpt2", "hf_causal_lm",
                  "inception_v3", "lenet5", "llama", "mlp", "mobilenet_v2", "mobilenet_v3_large",
                  "mobilenet_v3_small", "qwen2", "resnet101", "resnet110", "resnet1202",
                  "resnet152", "resnet18", "resnet20", "resnet32", "resnet34", "resnet44",
                  "resnet50", "resnet56", "wide_resnet101_2", "wide_resnet50_2", "wrn"));
  EXPECT_EQ(FindRegistry("model"), &ModelRegistry());
}

TEST(ModelRegistryTest, EveryKwargIsDocumented) {
  for (const std::string& key : ModelRegistry().Keys()) {
    std::optional<std::vector<KwargSpec>> specs = ModelRegistry().KwargSpecs(key);
    ASSERT_TRUE(specs.has_value()) << key;
    for (const KwargSpec& spec : *specs) {
      EXPECT_NE(spec.type, KwargType::kAny) << key << "." << spec.name;
      EXPECT_FALSE(spec.doc.empty()) << key << "." << spec.name;
    }
  }
}

TEST(ModelRegistryTest, UnknownKeyNamesTheNearest) {
  EXPECT_THAT(MakeRegisteredModel("resnet21"),
              StatusIs(absl::StatusCode::kNotFound,
                       Eq("no model \"resnet21\" is registered; did you mean \"resnet20\"? "
                          "registered: alexnet, custom_densenet169, custom_densenet201, "
                          "custom_inception_v3, custom_resnet152, densenet121, densenet161, "
                          "densenet169, densenet201, "
                          "densenet_bc_k12_depth100, densenet_bc_k24_depth250, "
                          "densenet_bc_k40_depth190, efficientnet_b0, efficientnet_b1, "
                          "efficientnet_b2, efficientnet_b3, efficientnet_b4, efficientnet_b5, "
                          "efficientnet_b6, efficientnet_b7, fashion_cnn, gpt2, hf_causal_lm, "
                          "inception_v3, lenet5, llama, mlp, mobilenet_v2, mobilenet_v3_large, "
                          "mobilenet_v3_small, qwen2, resnet101, resnet110, resnet1202, resnet152, "
                          "resnet18, resnet20, resnet32, resnet34, resnet44, resnet50, resnet56, "
                          "wide_resnet101_2, wide_resnet50_2, wrn")));
}

TEST(ModelRegistryTest, BadKwargsAreNamed) {
  const auto invalid = [](const std::string& message) {
    return StatusIs(absl::StatusCode::kInvalidArgument, Eq(message));
  };
  EXPECT_THAT(MakeRegisteredModel("fashion_cnn", {{"widht", 4}}),
              invalid("unknown kwarg \"widht\" for model \"fashion_cnn\"; did you mean "
                      "\"width\"?"));
  EXPECT_THAT(MakeRegisteredModel("fashion_cnn", {{"width", "4"}}),
              invalid("kwarg \"width\" for model \"fashion_cnn\" must be an integer, not a "
                      "string"));
  EXPECT_THAT(MakeRegisteredModel("fashion_cnn", {{"width", 0}}),
              invalid("kwarg \"width\" for model \"fashion_cnn\" must be in [1, inf], got 0"));
  EXPECT_THAT(MakeRegisteredModel("mlp", {{"hidden", c10::List<int64_t>({256, 128})}}),
              invalid("missing required kwarg \"in_features\" for model \"mlp\" (input features "
                      "after flattening (784 for 28x28 grey images); required)"));
  EXPECT_THAT(MakeRegisteredModel("mlp", {{"in_features", 4}, {"dropout", 1}}),
              invalid("kwarg \"dropout\" for model \"mlp\" must be in [0, 1), got 1"));
  EXPECT_THAT(MakeRegisteredModel("resnet20", {{"shortcut", "zero-pad"}}),
              invalid("kwarg \"shortcut\" for model \"resnet20\" is \"zero-pad\"; did you mean "
                      "\"zero_pad\"?"));
  EXPECT_THAT(MakeRegisteredModel("wrn", {{"depth", 15}}),
              invalid("model \"wrn\": kwarg \"depth\" must be 6n + 4 (10, 16, 22, 28, 40, ...), "
                      "got 15; try 10 or 16"));
}

// The module paths a config hooks: fashion_cnn's layer2 gives 2 * width channels at 7x7.
TEST(FashionCnnTest, Layer2HasTwiceTheWidthAt7x7) {
  absl::StatusOr<std::unique_ptr<Model>> model = MakeRegisteredModel("fashion_cnn", {{"width", 4}});
  ASSERT_THAT(model, IsOk());
  std::vector<std::string> paths;
  for (const ModuleInfo& m : (*model)->NamedModules()) paths.push_back(m.path);
  EXPECT_THAT(paths, IsSupersetOf({"stem", "layer1", "layer2", "head"}));
  at::Tensor layer2;
  absl::StatusOr<HookHandle> handle = (*model)->AddHook(
      "layer2", [&](const std::vector<c10::IValue>&, const c10::IValue& output) {
        layer2 = output.toTensor();
      });
  ASSERT_THAT(handle, IsOk());
  (*model)->Forward({at::randn({3, 1, 28, 28})});
  EXPECT_THAT(layer2.sizes(), ElementsAre(3, 8, 7, 7));
}

// torchvision's naming: conv1, bn1, layer<i>.<j>.conv1 ..., downsample.0/.1 (option B), fc.
TEST(CifarResNetTest, ModulePathsFollowTorchvision) {
  absl::StatusOr<std::unique_ptr<Model>> model = MakeRegisteredModel("resnet20");
  ASSERT_THAT(model, IsOk());
  std::vector<std::string> paths;
  for (const ModuleInfo& m : (*model)->NamedModules()) {
    paths.push_back(absl::StrCat(m.path, ":", m.type));
  }
  EXPECT_THAT(paths, IsSupersetOf({":CifarResNet", "conv1:Conv2d", "bn1:BatchNorm2d",
                                   "relu:ReLU", "layer1:HookedSequential",
                                   "layer1.0:BasicBlock", "layer1.0.conv1:Conv2d",
                                   "layer2.0.downsample:HookedSequential",
                                   "layer2.0.downsample.0:Conv2d",
                                   "layer2.0.downsample.1:BatchNorm2d", "layer3.2.bn2:BatchNorm2d",
                                   "avgpool:AdaptiveAvgPool2d", "fc:Linear"}));
  EXPECT_THAT(paths, Not(Contains("layer1.0.downsample:HookedSequential")));
}

// Option A's shortcut subsamples and pads channels with zeros: layer2.0's downsample maps
// [N, 16, 32, 32] to [N, 32, 16, 16] with x[:, :, ::2, ::2] in channels 8..23.
TEST(CifarResNetTest, ZeroPadShortcutSubsamplesAndPads) {
  absl::StatusOr<std::unique_ptr<Model>> model =
      MakeRegisteredModel("resnet20", {{"shortcut", "zero_pad"}});
  ASSERT_THAT(model, IsOk());
  at::Tensor in, out;
  absl::StatusOr<HookHandle> handle = (*model)->AddHook(
      "layer2.0.downsample", [&](const std::vector<c10::IValue>& args, const c10::IValue& o) {
        in = args.at(0).toTensor();
        out = o.toTensor();
      });
  ASSERT_THAT(handle, IsOk());
  (*model)->Forward({at::randn({2, 3, 32, 32})});
  ASSERT_THAT(out.sizes(), ElementsAre(2, 32, 16, 16));
  using at::indexing::None;
  using at::indexing::Slice;
  const at::Tensor sub = in.index({Slice(), Slice(), Slice(None, None, 2), Slice(None, None, 2)});
  EXPECT_TRUE(at::equal(out.index({Slice(), Slice(8, 24)}), sub));
  EXPECT_EQ(out.index({Slice(), Slice(0, 8)}).abs().sum().item<float>(), 0);
  EXPECT_EQ(out.index({Slice(), Slice(24, 32)}).abs().sum().item<float>(), 0);
}

TEST(WideResNetTest, ShortcutPaths) {
  absl::StatusOr<std::unique_ptr<Model>> model =
      MakeRegisteredModel("wrn", {{"widen_factor", 2}});
  ASSERT_THAT(model, IsOk());
  std::vector<std::string> paths;
  for (const ModuleInfo& m : (*model)->NamedModules()) {
    paths.push_back(absl::StrCat(m.path, ":", m.type));
  }
  EXPECT_THAT(paths, IsSupersetOf({"conv1:Conv2d", "layer1.0.bn1:BatchNorm2d",
                                   "layer1.0.shortcut:HookedSequential",
                                   "layer1.0.shortcut.0:Conv2d", "layer1.1.shortcut:Identity",
                                   "layer3.1.dropout:Dropout", "bn1:BatchNorm2d", "fc:Linear"}));
}

// The parameter and buffer names and shapes of torchdistill's resnet20 and WRN-16-2 (recorded by
// testdata/record_torchdistill_shapes.py): its state dicts load into these by name.
TEST(CifarResNetTest, StateMatchesTorchdistill) {
  std::ifstream file("distill/models/testdata/torchdistill_state_shapes.txt");
  ASSERT_TRUE(file.is_open());
  std::map<std::string, std::vector<std::string>> expected;
  for (std::string line; std::getline(file, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    ASSERT_EQ(fields.size(), 3u) << line;
    expected[fields[0]].push_back(absl::StrCat(fields[1], " ", fields[2]));
  }
  const std::map<std::string, std::pair<std::string, Kwargs>> models = {
      {"resnet20", {"resnet20", {}}},
      {"wrn_16_2", {"wrn", {{"widen_factor", 2}}}},
      {"densenet_bc_k12_depth100", {"densenet_bc_k12_depth100", {}}},
      {"tv_resnet50", {"resnet50", {{"num_classes", 10}}}}};
  ASSERT_EQ(expected.size(), models.size());
  for (const auto& [name, key_kwargs] : models) {
    SCOPED_TRACE(name);
    absl::StatusOr<std::unique_ptr<Model>> model =
        MakeRegisteredModel(key_kwargs.first, key_kwargs.second);
    ASSERT_THAT(model, IsOk());
    std::vector<std::string> actual;
    for (const auto& tensors : {(*model)->NamedParameters(), (*model)->NamedBuffers()}) {
      for (const auto& [path, t] : tensors) {
        actual.push_back(
            absl::StrCat(path, " ", t.dim() == 0 ? "scalar" : absl::StrJoin(t.sizes(), "x")));
      }
    }
    EXPECT_THAT(actual, UnorderedElementsAreArray(expected[name]));
  }
}

// Logits equal those of the Python references recorded by testdata/record_parity_outputs.py
// (torchdistill's resnet20; with option A shortcuts; WRN-16-2 with the authors' block;
// fashion_cnn; torchdistill's DenseNet-BC k12 depth 100; torchvision's ImageNet classifiers), with
// the parameters filled the same way: the i-th in sorted-name order is
// 0.1 * sin(0.37 * arange(numel) + i). Training mode: batch norms use the batch's statistics.
TEST(ModelParityTest, LogitsMatchPythonReferences) {
  std::ifstream file("distill/models/testdata/parity_outputs.txt");
  ASSERT_TRUE(file.is_open());
  std::map<std::string, std::vector<float>> expected;
  for (std::string line; std::getline(file, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    for (size_t i = 1; i < fields.size(); ++i) {
      float v = 0;
      ASSERT_TRUE(absl::SimpleAtof(fields[i], &v)) << fields[i];
      expected[fields[0]].push_back(v);
    }
  }
  struct Reference {
    std::string key;
    Kwargs kwargs;
    std::vector<int64_t> input;
    bool eval = false;  // recorded in eval mode
  };
  const std::map<std::string, Reference> references = {
      {"resnet20", {"resnet20", {}, {2, 3, 32, 32}}},
      {"resnet20_zero_pad", {"resnet20", {{"shortcut", "zero_pad"}}, {2, 3, 32, 32}}},
      {"wrn_16_2", {"wrn", {{"widen_factor", 2}}, {2, 3, 32, 32}}},
      {"fashion_cnn_w4", {"fashion_cnn", {{"width", 4}}, {2, 1, 28, 28}}},
      {"densenet_bc_k12_depth100", {"densenet_bc_k12_depth100", {}, {2, 3, 32, 32}}},
      {"tv_resnet18", {"resnet18", {{"num_classes", 10}}, {2, 3, 32, 32}}},
      {"tv_resnet50", {"resnet50", {{"num_classes", 10}}, {2, 3, 32, 32}}},
      {"tv_densenet121", {"densenet121", {{"num_classes", 10}}, {2, 3, 32, 32}}},
      {"tv_alexnet", {"alexnet", {{"num_classes", 10}, {"dropout", 0.0}}, {2, 3, 64, 64}}},
      {"tv_mobilenet_v2",
       {"mobilenet_v2", {{"num_classes", 10}, {"dropout", 0.0}}, {2, 3, 64, 64}}},
      {"tv_mobilenet_v3_large",
       {"mobilenet_v3_large", {{"num_classes", 10}, {"dropout", 0.0}}, {2, 3, 64, 64}}},
      {"tv_mobilenet_v3_small",
       {"mobilenet_v3_small", {{"num_classes", 10}, {"dropout", 0.0}}, {2, 3, 64, 64}}},
      {"tv_efficientnet_b0",
       {"efficientnet_b0",
        {{"num_classes", 10}, {"dropout", 0.0}, {"stochastic_depth_prob", 0.0}},
        {2, 3, 64, 64}}},
      {"tv_inception_v3",
       {"inception_v3", {{"num_classes", 10}, {"aux_logits", false}, {"dropout", 0.0}},
        {2, 3, 75, 75}}},
      // (logits, aux_logits) in training mode, compared as one row.
      {"tv_inception_v3_aux",
       {"inception_v3", {{"num_classes", 10}, {"transform_input", true}, {"dropout", 0.0}},
        {2, 3, 299, 299}}},
      // HND/GHND's students as torchdistill's in-package definitions compute them.
      {"td_custom_resnet152", {"custom_resnet152", {{"num_classes", 10}}, {2, 3, 64, 64}}},
      {"td_custom_densenet169", {"custom_densenet169", {{"num_classes", 10}}, {2, 3, 64, 64}}},
      {"td_custom_inception_v3",
       {"custom_inception_v3", {{"num_classes", 10}}, {2, 3, 75, 75}, /*eval=*/true}}};
  ASSERT_EQ(expected.size(), references.size());
  for (const auto& [name, ref] : references) {
    SCOPED_TRACE(name);
    absl::StatusOr<std::unique_ptr<Model>> model = MakeRegisteredModel(ref.key, ref.kwargs);
    ASSERT_THAT(model, IsOk());
    std::vector<NamedTensor> params = (*model)->NamedParameters();
    std::sort(params.begin(), params.end(),
              [](const NamedTensor& a, const NamedTensor& b) { return a.first < b.first; });
    {
      at::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        at::Tensor& p = params[i].second;
        p.copy_((at::arange(p.numel(), at::kFloat) * 0.37 + static_cast<double>(i))
                    .sin()
                    .mul(0.1)
                    .reshape(p.sizes()));
      }
    }
    (*model)->SetTraining(!ref.eval);
    int64_t numel = 1;
    for (int64_t d : ref.input) numel *= d;
    const at::Tensor x = at::sin(at::arange(numel, at::kFloat) * 0.01).reshape(ref.input);
    const c10::IValue output = (*model)->Forward({x});
    std::vector<at::Tensor> outs;
    if (output.isTuple()) {
      for (const c10::IValue& o : output.toTupleRef().elements()) outs.push_back(o.toTensor());
    } else {
      outs.push_back(output.toTensor());
    }
    const at::Tensor out = at::stack(outs).detach();
    const at::Tensor want = at::tensor(expected[name]).reshape(out.sizes());
    EXPECT_TRUE(at::allclose(out, want, /*rtol=*/1e-4, /*atol=*/1e-5))
        << "got\n" << out << "\nwant\n" << want;
  }
}

// Training mode normalizes with the batch's statistics and updates the running ones; eval mode
// uses and keeps the running ones.
TEST(TrainEvalTest, BatchNormFollowsTheMode) {
  at::manual_seed(0);
  absl::StatusOr<std::unique_ptr<Model>> model = MakeRegisteredModel("fashion_cnn", {{"width", 4}});
  ASSERT_THAT(model, IsOk());
  const auto running_mean = [&] {
    for (const auto& [name, t] : (*model)->NamedBuffers()) {
      if (name == "stem.1.running_mean") return t.clone();
    }
    return at::Tensor();
  };
  const at::Tensor x = at::randn({8, 1, 28, 28}) * 3 + 1;
  const at::Tensor initial = running_mean();
  ASSERT_TRUE(initial.defined());
  (*model)->SetTraining(false);
  const at::Tensor eval_out = (*model)->Forward({x}).toTensor();
  EXPECT_TRUE(at::equal(running_mean(), initial));
  (*model)->SetTraining(true);
  const at::Tensor train_out = (*model)->Forward({x}).toTensor();
  EXPECT_FALSE(at::equal(running_mean(), initial));
  EXPECT_FALSE(at::allclose(train_out, eval_out));
}

// Dropout draws new masks in training mode only.
// torchvision's StochasticDepth(p, "row") in training: each sample's residual branch is zeroed
// or scaled by 1 / (1 - p); in eval mode it passes as it is.
TEST(TrainEvalTest, StochasticDepthDropsRowsInTraining) {
  at::manual_seed(0);
  absl::StatusOr<std::unique_ptr<Model>> model = MakeRegisteredModel(
      "efficientnet_b0",
      {{"num_classes", 10}, {"dropout", 0.0}, {"stochastic_depth_prob", 0.8}});
  ASSERT_THAT(model, IsOk());
  // features.7 has one block; features.6.3 is the last residual block before it: p = 0.8 * 14/16.
  std::vector<c10::IValue> in, out;
  absl::StatusOr<HookHandle> hook = (*model)->AddHook(
      "features.6.3.stochastic_depth",
      [&](const std::vector<c10::IValue>& args, const c10::IValue& output) {
        in.push_back(args[0].toTensor().clone());
        out.push_back(output.toTensor().clone());
      });
  ASSERT_THAT(hook, IsOk());
  const at::Tensor x = at::randn({16, 3, 32, 32});
  (*model)->Forward({x});
  ASSERT_EQ(out.size(), 1u);
  const double survival = 1.0 - 0.8 * 14.0 / 16.0;
  int dropped = 0;
  for (int64_t i = 0; i < 16; ++i) {
    const at::Tensor row = out[0].toTensor()[i], kept = in[0].toTensor()[i] / survival;
    if (at::equal(row, at::zeros_like(row))) {
      ++dropped;
    } else {
      EXPECT_TRUE(at::allclose(row, kept, 1e-5, 1e-6)) << "sample " << i;
    }
  }
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, 16);
  (*model)->SetTraining(false);
  (*model)->Forward({x});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(at::equal(out[1].toTensor(), in[1].toTensor()));
}

TEST(TrainEvalTest, DropoutFollowsTheMode) {
  for (const auto& [key, kwargs] : std::vector<std::pair<std::string, Kwargs>>{
           {"mlp", {{"in_features", 32}, {"dropout", 0.5}}},
           {"fashion_cnn", {{"width", 4}, {"dropout", 0.5}}},
           {"wrn", {{"depth", 10}, {"widen_factor", 1}, {"dropout", 0.5}}}}) {
    SCOPED_TRACE(key);
    at::manual_seed(0);
    absl::StatusOr<std::unique_ptr<Model>> model = MakeRegisteredModel(key, kwargs);
    ASSERT_THAT(model, IsOk());
    const at::Tensor x =
        key == "mlp" ? at::randn({4, 32}) : at::randn({4, key == "wrn" ? 3 : 1, 28, 28});
    // Batch norms also differ between two training forwards only through dropout: their batch
    // statistics are those of the same batch.
    const at::Tensor a = (*model)->Forward({x}).toTensor();
    const at::Tensor b = (*model)->Forward({x}).toTensor();
    EXPECT_FALSE(at::allclose(a, b));
    (*model)->SetTraining(false);
    EXPECT_TRUE(at::equal((*model)->Forward({x}).toTensor(), (*model)->Forward({x}).toTensor()));
  }
}

}  // namespace
}  // namespace kd
