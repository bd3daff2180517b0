// silverspoon-kd's feature distillers as a stage's feature_distillation: one training step of
// the holistic form (projectors inferred from the shapes, their seeded initial values, the
// alignments' weighted sum beside a task loss, magnitude-aware or not, the student clipped
// without its projectors) equal to silverspoon-kd's HolisticDistiller, on a tiny Llama pair
// (native) and on two CNNs (TorchScript). The references are make_feature_kd_fixtures.py's:
// silverspoon-kd's own Trainer loop, one step.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/modules/conv.h>
#include <torch/optim/optimizer.h>

#include "absl/strings/str_cat.h"
#include "base/torch_file.h"
#include "distill/boxes/box.h"
#include "distill/boxes/projector_fusion.h"
#include "distill/boxes/testing/box_test_fixture.h"
#include "distill/models/causal_lm.h"
#include "distill/models/hf_causal_lm.h"
#include "hooks/torchscript_model.h"
#include "memdiag/tracking_allocator.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace {

using test::BoxTest;
using test::ExpectSameStudent;
using test::Parse;
using test::RunDir;

std::map<std::string, at::Tensor> LoadCase(const std::string& name) {
  std::map<std::string, at::Tensor> expected;
  absl::StatusOr<c10::IValue> saved =
      ReadTorchFile(test::FixturePath("feature_kd/" + name + ".pt"));
  EXPECT_THAT(saved, IsOk());
  if (!saved.ok()) return expected;
  for (const auto& entry : saved->toGenericDict()) {
    expected[entry.key().toStringRef()] = entry.value().toTensor();
  }
  return expected;
}

// The parameters the optimizer trains beyond the student's (the projectors), in order.
std::vector<at::Tensor> ProjectorParams(Box& box) {
  std::set<const c10::TensorImpl*> student;
  for (const NamedTensor& p : box.student().NamedParameters()) {
    student.insert(p.second.unsafeGetTensorImpl());
  }
  std::vector<at::Tensor> out;
  absl::StatusOr<torch::optim::Optimizer*> optimizer = box.Optimizer();
  EXPECT_THAT(optimizer, IsOk());
  if (!optimizer.ok()) return out;
  for (const auto& group : (*optimizer)->param_groups()) {
    for (const at::Tensor& p : group.params()) {
      if (student.count(p.unsafeGetTensorImpl()) == 0) out.push_back(p);
    }
  }
  return out;
}

// `expected`'s "<prefix>.<alignment>.<projector>.<param>" entries in alignment order (each
// projector's weight, then bias), as ProjectorParams lists them.
std::vector<std::pair<std::string, at::Tensor>> ExpectedProjectors(
    const std::map<std::string, at::Tensor>& expected, const std::string& prefix,
    const std::vector<std::string>& alignments, const std::vector<std::string>& projectors) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const std::string& a : alignments) {
    for (const std::string& projector : projectors) {
      for (const char* param : {"weight", "bias"}) {
        const std::string key = absl::StrCat(prefix, ".", a, ".", projector, ".", param);
        if (expected.count(key) > 0) out.emplace_back(key, expected.at(key));
      }
    }
  }
  return out;
}

std::string Step(const std::string& dataset, const std::string& stage) {
  return absl::StrCat(R"pb(run { name: "feature_kd" seed: 7 })pb", " ", dataset, " ",
                      R"pb(train { name: "fkd" num_epochs: 1
                                   train_data_loader { dataset_id: "train" batch_size: 2 }
                                   optimizer {
                                     key: "AdamW"
                                     kwargs { name: "lr" number: 0.01 }
                                     kwargs { name: "weight_decay" number: 0 }
                                     max_grad_norm: 1
                                   }
                                   teacher_cache { mode: OFF }
                                   overlap_teacher: OFF)pb",
                      " ", stage, " }");
}

// One step of `box` on `input` against `expected`: the projectors' initial values, the loss,
// the student's and the projectors' values after the step.
void ExpectStepEquals(Box& box, const at::Tensor& input,
                      const std::map<std::string, at::Tensor>& expected,
                      const std::vector<std::string>& alignments,
                      const std::vector<std::string>& projectors, int num_projector_params) {
  std::vector<at::Tensor> made = ProjectorParams(box);
  const auto init = ExpectedProjectors(expected, "init", alignments, projectors);
  ASSERT_EQ(made.size(), init.size());
  ASSERT_EQ(static_cast<int>(made.size()), num_projector_params);
  for (size_t i = 0; i < made.size(); ++i) {
    test::ExpectNearScale(made[i].detach(), init[i].second, init[i].first);
  }
  ASSERT_THAT(box.PreEpoch(0), IsOk());
  Batch batch{.samples = input, .targets = input};
  ASSERT_THAT(box.PreForward(batch), IsOk());
  absl::StatusOr<at::Tensor> loss = box.Forward(batch);
  ASSERT_THAT(loss, IsOk());
  test::ExpectNearScale(loss->detach(), expected.at("loss"), "loss");
  ASSERT_THAT(box.PostForward(*loss), IsOk());
  int params = 0;
  for (const NamedTensor& p : box.student().NamedParameters()) {
    test::ExpectNearScale(p.second.detach(), expected.at("after." + p.first), "after " + p.first);
    ++params;
  }
  EXPECT_GT(params, 0);
  const auto after = ExpectedProjectors(expected, "after", alignments, projectors);
  ASSERT_EQ(made.size(), after.size());
  for (size_t i = 0; i < made.size(); ++i) {
    test::ExpectNearScale(made[i].detach(), after[i].second, after[i].first);
  }
}

std::string TokenData() {
  return absl::StrCat(
      "datasets { id: \"train\" key: \"token_file\" kwargs { name: \"path\" str: \"",
      test::WriteRuleTokens("feature_kd.bin", 12 * 8, 3,
                            {.vocab = 64, .run = 6, .mul = 5, .add = 3}),
      "\" } kwargs { name: \"block_size\" integer: 12 } kwargs { name: \"vocab_size\" integer: "
      "64 } }");
}

constexpr char kImageData[] = R"pb(
  datasets {
    id: "train"
    key: "synthetic"
    kwargs { name: "num_samples" integer: 4 }
    kwargs { name: "channels" integer: 3 }
    kwargs { name: "height" integer: 8 }
    kwargs { name: "width" integer: 8 }
  })pb";

struct LmPair {
  std::shared_ptr<CausalLm> teacher, student;
};

LmPair LoadLms(const std::string& student) {
  absl::StatusOr<std::shared_ptr<CausalLm>> s = LoadHfCausalLm(test::FixturePath("lm/" + student));
  absl::StatusOr<std::shared_ptr<CausalLm>> t = LoadHfCausalLm(test::FixturePath("lm/llama"));
  EXPECT_THAT(s, IsOk());
  EXPECT_THAT(t, IsOk());
  return {t.ok() ? *t : nullptr, s.ok() ? *s : nullptr};
}

// --- Holistic ------------------------------------------------------------------------------

// model.layers.1 <- model.layers.0 (mse) and model.norm <- model.norm (cosine, weight 2): the
// student's hidden 16 against the teacher's 32, so a Linear projector each. silverspoon-kd's
// HolisticDistiller clips the student's parameters only (the Trainer's clip of the model).
constexpr char kHolisticLm[] = R"pb(
  feature_distillation { clip_projectors: false
                         alignments {
                           teacher { path: "model.layers.1" }
                           student { path: "model.layers.0" }
                         }
                         alignments {
                           teacher { path: "model.norm" }
                           student { path: "model.norm" }
                           loss: "cosine"
                           loss_weight: 2
                         })pb";

TEST_F(BoxTest, HolisticStepEqualsSilverspoonKdsOnLlamas) {
  for (const bool alpha : {false, true}) {
    SCOPED_TRACE(alpha ? "alpha 0.5, magnitude-aware" : "alignments only");
    const std::string name = alpha ? "holistic_lm_alpha" : "holistic_lm";
    const std::map<std::string, at::Tensor> expected = LoadCase(name);
    ASSERT_FALSE(expected.empty());
    LmPair lms = LoadLms("kd_student");
    ASSERT_NE(lms.student, nullptr);
    // silverspoon-kd's alpha: (1 - alpha) * alignments + alpha * the student's own loss.
    const std::string stage = alpha ? absl::StrCat(kHolisticLm, R"pb(                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                    weight: 0.5 }
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                         criterion {
                               magnitude_aware_weighting: true
                               terms {
                                 name: "hard"
                                 key: "CausalLMLoss"
                                 weight: 0.5
                                 inputs { arg: "input" source: STUDENT }
                                 inputs { arg: "labels" source: TARGETS }
                               }
                             })pb")
                                    : absl::StrCat(kHolisticLm, " }");
    auto box = MakeBox(
        Parse(Step(TokenData(), stage)),
        {.teacher = MakeCausalLmModel(lms.teacher), .student = MakeCausalLmModel(lms.student)},
        {.run_dir = RunDir(name)});
    ASSERT_THAT(box, IsOk());
    ExpectStepEquals(**box, expected.at("input"), expected, {"model.layers.0", "model.norm"},
                     {"output_projector"}, 4);
  }
}

// The TorchScript CNNs (layer1 and layer2 aligned) in a box with the feature_distillation
// `options`, its run directory named `name`.
absl::StatusOr<std::unique_ptr<Box>> MakeCnnBox(const std::string& name,
                                                const std::string& options) {
  absl::StatusOr<std::unique_ptr<Model>> teacher =
      LoadTorchScriptModel(test::FixturePath("feature_kd/cnn_teacher.pt"));
  absl::StatusOr<std::unique_ptr<Model>> student =
      LoadTorchScriptModel(test::FixturePath("feature_kd/cnn_student.pt"));
  if (!teacher.ok()) return teacher.status();
  if (!student.ok()) return student.status();
  return MakeBox(Parse(Step(kImageData, absl::StrCat("feature_distillation { ", options,
                                                     R"pb(                                                          alignments {
                                                            teacher { path: "layer1" }
                                                            student { path: "layer1" }
                                                          }
                                                          alignments {
                                                            teacher { path: "layer2" }
                                                            student { path: "layer2" }
                                                          }
                                                        })pb"))),
                 {.teacher = *std::move(teacher), .student = *std::move(student)},
                 {.run_dir = RunDir(name)});
}

// One step on the TorchScript CNNs with the feature_distillation `options` against `name`'s
// fixture.
void ExpectCnnStepEquals(const std::string& name, const std::string& options,
                         const std::vector<std::string>& projectors, int num_projector_params) {
  const std::map<std::string, at::Tensor> expected = LoadCase(name);
  ASSERT_FALSE(expected.empty());
  auto box = MakeCnnBox(name, options);
  ASSERT_THAT(box, IsOk());
  ExpectStepEquals(**box, expected.at("input"), expected, {"layer1", "layer2"}, projectors,
                   num_projector_params);
}

// 8 and 16 channels against 16 and 32 at the same sizes: a 1x1 convolution each.
TEST_F(BoxTest, HolisticStepEqualsSilverspoonKdsOnTorchScriptCnns) {
  ExpectCnnStepEquals("holistic_cnn", "clip_projectors: false", {"output_projector"}, 2);
}

// The projectors a stage trains are its auxiliary modules (Box::AuxiliaryModules), the
// optimizer's own parameters, and fuse into the module that reads them.
TEST_F(BoxTest, TrainedProjectorsAreAuxiliaryModulesThatFuse) {
  auto box = MakeCnnBox("holistic_cnn_fusion", "clip_projectors: false");
  ASSERT_THAT(box, IsOk());
  ASSERT_THAT((*box)->PreEpoch(0), IsOk());
  at::manual_seed(3);
  Batch batch{.samples = at::randn({2, 3, 8, 8}), .targets = at::zeros({2}, at::kLong)};
  ASSERT_THAT((*box)->PreForward(batch), IsOk());
  absl::StatusOr<at::Tensor> loss = (*box)->Forward(batch);
  ASSERT_THAT(loss, IsOk());
  ASSERT_THAT((*box)->PostForward(*loss), IsOk());

  auto aux = (*box)->AuxiliaryModules();
  ASSERT_THAT(aux, IsOk());
  std::vector<std::string> names;
  std::vector<at::Tensor> params;
  for (const auto& [name, module] : *aux) {
    names.push_back(name);
    for (const at::Tensor& p : module->parameters()) params.push_back(p);
  }
  EXPECT_THAT(names, ::testing::ElementsAre("student.layer1/output_projector",
                                            "student.layer2/output_projector"));
  // The very tensors the optimizer stepped.
  const std::vector<at::Tensor> trained = ProjectorParams(**box);
  ASSERT_EQ(params.size(), trained.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].unsafeGetTensorImpl(), trained[i].unsafeGetTensorImpl()) << i;
  }

  // layer1's projector (8 -> 16 channels, 1x1, no bias) folded into a 3x3 convolution that
  // reads the teacher's 16 channels: one convolution on the student's 8.
  const std::shared_ptr<torch::nn::Module>& projector = aux->front().second;
  auto* projector_conv = dynamic_cast<torch::nn::Conv2dImpl*>(projector.get());
  ASSERT_NE(projector_conv, nullptr);
  torch::nn::Conv2d reader(torch::nn::Conv2dOptions(16, 4, 3).padding(1));
  absl::StatusOr<std::shared_ptr<torch::nn::Module>> fused =
      FuseProjectorsIntoModule(reader.ptr(), {.output_projector = projector});
  ASSERT_THAT(fused, IsOk());
  auto* fused_conv = dynamic_cast<torch::nn::Conv2dImpl*>(fused->get());
  ASSERT_NE(fused_conv, nullptr);
  EXPECT_EQ(fused_conv->options.in_channels(), 8);
  at::NoGradGuard no_grad;
  const at::Tensor x = at::randn({2, 8, 8, 8});
  test::ExpectNearScale(fused_conv->forward(x), reader->forward(projector_conv->forward(x)),
                        "fused");
}

// --- Blockwise -----------------------------------------------------------------------------

std::string BlockwiseLm(bool backward_per_block) {
  return absl::StrCat(R"pb(feature_distillation { mode: BLOCKWISE
                                                  alignments {
                                                    teacher { path: "model.layers.0" }
                                                    student { path: "model.layers.0" }
                                                  }
                                                  alignments {
                                                    teacher { path: "model.layers.1" }
                                                    student { path: "model.layers.1" }
                                                  })pb",
                      backward_per_block ? " backward_per_block: true" : "", " }");
}

// Each student decoder layer on its teacher layer's captured inputs (hidden states, rotary
// tables, mask), against its output; each alignment clipped on its own.
TEST_F(BoxTest, BlockwiseStepEqualsSilverspoonKdsOnLlamas) {
  const std::map<std::string, at::Tensor> expected = LoadCase("blockwise_lm");
  ASSERT_FALSE(expected.empty());
  for (const bool per_block : {false, true}) {
    SCOPED_TRACE(per_block ? "backward_per_block" : "one backward");
    LmPair lms = LoadLms("bkd_student");
    ASSERT_NE(lms.student, nullptr);
    auto box = MakeBox(
        Parse(Step(TokenData(), BlockwiseLm(per_block))),
        {.teacher = MakeCausalLmModel(lms.teacher), .student = MakeCausalLmModel(lms.student)},
        {.run_dir = RunDir(absl::StrCat("blockwise_lm", per_block))});
    ASSERT_THAT(box, IsOk());
    ExpectStepEquals(**box, expected.at("input"), expected, {}, {}, 0);
  }
}

// The same pairs made by silverspoon-kd's create_alignments pattern (re.search over both
// models' module paths): the same step.
TEST_F(BoxTest, CreateAlignmentsPatternsGiveTheListedAlignmentsStep) {
  const std::map<std::string, at::Tensor> expected = LoadCase("blockwise_lm");
  ASSERT_FALSE(expected.empty());
  LmPair lms = LoadLms("bkd_student");
  ASSERT_NE(lms.student, nullptr);
  auto box = MakeBox(
      Parse(Step(TokenData(), R"pb(feature_distillation {
                                     mode: BLOCKWISE
                                     create_alignments { modules: "model\\.layers\\.\\d+$" }
                                   })pb")),
      {.teacher = MakeCausalLmModel(lms.teacher), .student = MakeCausalLmModel(lms.student)},
      {.run_dir = RunDir("blockwise_lm_patterns")});
  ASSERT_THAT(box, IsOk());
  ExpectStepEquals(**box, expected.at("input"), expected, {}, {}, 0);
}

// layer1 on the images against the teacher's 16 channels (an output projector); layer2 on the
// teacher's 16-channel layer1 output, which the student's layer2 takes as 8 (an input projector
// too).
TEST_F(BoxTest, BlockwiseStepEqualsSilverspoonKdsOnTorchScriptCnns) {
  ExpectCnnStepEquals("blockwise_cnn", "mode: BLOCKWISE", {"input_projector", "output_projector"},
                      3);
}

// backward_per_block: the same gradients as one backward, and a peak of about one block's
// activations (memdiag's tracking allocator) on 4 decoder layers.
TEST_F(BoxTest, BackwardPerBlockGivesTheSameGradientsWithALowerPeak) {
  TrackingAllocator& tracker = TrackingAllocator::Install();
  auto make = [](int64_t intermediate, uint64_t seed) {
    at::manual_seed(seed);
    absl::StatusOr<std::shared_ptr<CausalLm>> lm = MakeCausalLm({.architecture = "llama",
                                                                 .vocab_size = 64,
                                                                 .hidden_size = 64,
                                                                 .intermediate_size = intermediate,
                                                                 .num_hidden_layers = 4,
                                                                 .num_attention_heads = 4,
                                                                 .num_key_value_heads = 2});
    EXPECT_THAT(lm, IsOk());
    return *lm;
  };
  const std::string stage = absl::StrCat(R"pb(feature_distillation { mode: BLOCKWISE)pb", " ");
  std::map<bool, std::vector<at::Tensor>> grads;
  std::map<bool, int64_t> peaks;
  const at::Tensor ids = at::randint(64, {8, 128}, at::kLong);
  for (const bool per_block : {false, true}) {
    std::shared_ptr<CausalLm> teacher = make(256, 1), student = make(128, 2);
    std::string alignments;
    for (int i = 0; i < 4; ++i) {
      absl::StrAppend(&alignments, "alignments { teacher { path: \"model.layers.", i,
                      "\" } student { path: \"model.layers.", i, "\" } } ");
    }
    auto box = MakeBox(
        Parse(Step(TokenData(), absl::StrCat(stage, alignments,
                                             per_block ? "backward_per_block: true" : "", " }"))),
        {.teacher = MakeCausalLmModel(teacher), .student = MakeCausalLmModel(student)},
        {.run_dir = RunDir(absl::StrCat("peak", per_block))});
    ASSERT_THAT(box, IsOk());
    ASSERT_THAT((*box)->PreEpoch(0), IsOk());
    Batch batch{.samples = ids, .targets = ids};
    ASSERT_THAT((*box)->PreForward(batch), IsOk());
    tracker.ResetPeak();
    absl::StatusOr<at::Tensor> loss = (*box)->Forward(batch);
    ASSERT_THAT(loss, IsOk());
    if (!per_block) loss->backward();
    peaks[per_block] = tracker.peak_bytes() - tracker.baseline_bytes();
    for (const auto& p : student->parameters()) {
      if (p.grad().defined()) grads[per_block].push_back(p.grad().clone());
    }
  }
  ASSERT_EQ(grads[false].size(), grads[true].size());
  ASSERT_FALSE(grads[true].empty());
  for (size_t i = 0; i < grads[true].size(); ++i) {
    test::ExpectNearScale(grads[true][i], grads[false][i], absl::StrCat("gradient ", i));
  }
  RecordProperty("peak_per_block_bytes", std::to_string(peaks[true]));
  RecordProperty("peak_one_backward_bytes", std::to_string(peaks[false]));
  // Four blocks' activations against one block's (and the captured inputs both keep).
  EXPECT_LT(static_cast<double>(peaks[true]), 0.6 * static_cast<double>(peaks[false]))
      << "per block " << peaks[true] << " B, one backward " << peaks[false] << " B";
}

// --- Runs: Run(), validation of the whole student, resume, the teacher cache -------------------

std::string HfModel(const char* role, const std::string& folder) {
  return absl::StrCat(role, " { native { key: \"hf_causal_lm\" kwargs { name: \"path\" str: \"",
                      test::FixturePath("lm/" + folder), "\" } } }");
}

// Two epochs over 16 windows of the rule's tokens, validated by perplexity on 8 others.
std::string RunConfig(int epochs, const std::string& student, const std::string& stage) {
  const std::string tokens = test::WriteRuleTokens("feature_kd_run.bin", 12 * 24, 9,
                                                   {.vocab = 64, .run = 6, .mul = 5, .add = 3});
  auto dataset = [&](const char* id, int start, int stop) {
    return absl::StrCat("datasets { id: \"", id,
                        "\" key: \"token_file\" kwargs { name: \"path\" str: \"", tokens,
                        "\" } kwargs { name: \"block_size\" integer: 12 } kwargs { name: "
                        "\"vocab_size\" integer: 64 } subset { start: ",
                        start, " stop: ", stop, " } }");
  };
  return absl::StrCat(R"pb(run { name: "feature_kd_run" seed: 3 })pb", dataset("train", 0, 16),
                      dataset("val", 16, 24), HfModel("teacher", "llama"),
                      HfModel("student", student),
                      R"pb(evaluation {
                             metrics { key: "perplexity" }
                             primary_metric: "perplexity"
                             lower_is_better: true
                           })pb",
                      "train { name: \"fkd\" num_epochs: ", epochs, " ",
                      R"pb(train_data_loader { dataset_id: "train" batch_size: 4 shuffle: true }
                           val_data_loader { dataset_id: "val" batch_size: 4 }
                           optimizer {
                             key: "AdamW"
                             kwargs { name: "lr" number: 0.003 }
                             max_grad_norm: 1
                           }
                           overlap_teacher: OFF)pb",
                      " ", stage, " }");
}

constexpr char kHolisticRun[] = R"pb(
  feature_distillation {
    alignments {
      teacher { path: "model.layers.1" }
      student { path: "model.layers.0" }
    }
  })pb";

TEST_F(BoxTest, FeatureDistillationRunsResumeExactlyAndValidateTheWholeStudent) {
  std::string holistic_whole;
  for (const bool blockwise : {false, true}) {
    SCOPED_TRACE(blockwise ? "blockwise" : "holistic");
    const std::string student = blockwise ? "bkd_student" : "kd_student";
    const std::string stage =
        absl::StrCat(blockwise ? BlockwiseLm(true) : kHolisticRun, " teacher_cache { mode: OFF }");
    const std::string name = blockwise ? "bkd" : "hkd";
    const std::string whole = RunDir(name + "_whole"), parts = RunDir(name + "_parts");
    if (!blockwise) holistic_whole = whole;
    absl::StatusOr<RunResult> run =
        (*MakeBox(Parse(RunConfig(2, student, stage)), {.run_dir = whole}))->Run();
    ASSERT_THAT(run, IsOk());
    // The student validated end to end (its blocks are its modules): the perplexity moves as
    // they train.
    ASSERT_EQ(run->epochs.size(), 2u);
    const double first = run->epochs[0].metrics.at("perplexity");
    const double second = run->epochs[1].metrics.at("perplexity");
    EXPECT_TRUE(std::isfinite(first));
    EXPECT_TRUE(std::isfinite(second));
    EXPECT_NE(second, first);
    // Resumed after its first epoch (the projectors and the optimizer's state from the
    // checkpoint), the run equals the uninterrupted one bit for bit.
    ASSERT_THAT((*MakeBox(Parse(RunConfig(1, student, stage)), {.run_dir = parts}))->Run(), IsOk());
    auto resumed = MakeBox(Parse(RunConfig(2, student, stage)), {.run_dir = parts, .resume = true});
    ASSERT_THAT(resumed, IsOk());
    absl::StatusOr<RunResult> rest = (*resumed)->Run();
    ASSERT_THAT(rest, IsOk());
    EXPECT_EQ(rest->epochs_run, 1);
    ExpectSameStudent(whole, parts);
  }
  // The projectors' own optimizer (here the stage's settings again), stepped with the student's
  // as one (CompositeOptimizer): the same student; resumed from its checkpoint, exactly.
  const std::string composite = RunDir("hkd_composite"), composite_parts = RunDir("hkd_cparts");
  const std::string with_own = absl::StrCat(kHolisticRun, R"pb(teacher_cache { mode: OFF })pb");
  auto apart = [&](int epochs) {
    std::string text = RunConfig(epochs, "kd_student", with_own);
    const std::string at = "alignments {";
    text.insert(text.find(at), R"pb(projector_optimizer {
                                      key: "AdamW"
                                      kwargs { name: "lr" number: 0.003 }
                                    })pb");
    return Parse(text);
  };
  ASSERT_THAT((*MakeBox(apart(2), {.run_dir = composite}))->Run(), IsOk());
  test::ExpectSameStudent(holistic_whole, composite);
  ASSERT_THAT((*MakeBox(apart(1), {.run_dir = composite_parts}))->Run(), IsOk());
  ASSERT_THAT((*MakeBox(apart(2), {.run_dir = composite_parts, .resume = true}))->Run(), IsOk());
  ExpectSameStudent(composite, composite_parts);

  // The holistic stage's teacher values come from the teacher cache where it is exact: the
  // same student bit for bit, with hits in the second epoch.
  const std::string cached = RunDir("hkd_cached");
  test::ExpectTeacherCacheServesSecondEpoch(
      Parse(
          RunConfig(2, "kd_student", absl::StrCat(kHolisticRun, " teacher_cache { mode: AUTO }"))),
      cached);
  ExpectSameStudent(holistic_whole, cached);
}

// --- Bad input ----------------------------------------------------------------------------

TEST_F(BoxTest, FeatureDistillationRefusesWhatItCannotRun) {
  struct Case {
    std::string student, stage, message;
  };
  const std::vector<Case> cases = {
      {"kd_student",
       R"pb(feature_distillation {
              alignments {
                teacher { path: "model.layers.9" }
                student { path: "model.layers.0" }
              }
            })pb",
       "model.layers.9"},
      {"kd_student",
       R"pb(feature_distillation {
              alignments {
                teacher { path: "model.layers.1" }
                student { path: "model.layers.0" }
                auto_projector: false
              }
            })pb",
       "[4, 12, 16]"},
      {"kd_student",
       R"pb(feature_distillation {
              alignments {
                teacher { path: "model.embed_tokens" }
                student { path: "model.embed_tokens" io: INPUT }
              }
            })pb",
       "cannot infer a projector"},
      {"bkd_student",
       R"pb(feature_distillation {
              mode: BLOCKWISE
              alignments {
                teacher { path: "model.layers.0" }
                student { path: "model.layers.0" }
                loss_weight: 2
              }
            })pb",
       "loss_weight"},
      {"kd_student",
       R"pb(feature_distillation {
              alignments {
                teacher { path: "model.layers.1" }
                student { path: "model.layers.0" }
                input_projector { key: "GenericLinearProjector" }
              }
            })pb",
       "input_projector"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    absl::StatusOr<std::unique_ptr<Box>> box = MakeBox(
        Parse(RunConfig(1, c.student, absl::StrCat(c.stage, " teacher_cache { mode: OFF }"))),
        {.run_dir = RunDir("bad")});
    absl::Status status = box.ok() ? (*box)->Run().status() : box.status();
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(std::string(status.message()), testing::HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace kd
