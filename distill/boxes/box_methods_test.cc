// torchdistill's feature-distillation methods run through the box as its configs have them:
// FitNets' hint stage on trimmed models, VID, factor transfer, knowledge review, SSKD and CRD,
// each checked against what the method trains and reads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/optim/optimizer.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/torch_file.h"
#include "distill/boxes/box.h"
#include "distill/boxes/testing/box_test_fixture.h"
#include "distill/data/data_loader.h"
#include "distill/losses/criterion.h"
#include "hooks/io_dict.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using test::BoxTest;
using test::ExpectAuxModuleIsFile;
using test::ExpectHandLoopEqualsRun;
using test::FitNetConfig;
using test::kImages;
using test::Parse;
using test::RunDir;
using test::Stage;
using ::testing::AllOf;
using ::testing::HasSubstr;


TEST_F(BoxTest, AHintStageTrainsTheTrimmedModelsOnly) {
  const std::string hint = RunDir("fitnet_files") + "/hint_student.pt";
  auto box = MakeBox(Parse(FitNetConfig(hint)), {.run_dir = RunDir("fitnet_hand")});
  ASSERT_THAT(box, IsOk());
  std::map<std::string, at::Tensor> before;
  for (const auto& [name, t] : (*box)->student().NamedParameters()) before[name] = t.clone();
  std::map<std::string, at::Tensor> buffers_before;
  for (const auto& [name, t] : (*box)->student().NamedBuffers()) buffers_before[name] = t.clone();
  // The hint stage's epochs alone (its last PostEpoch moves the box on to the next stage).
  const int64_t hint_epochs = (*box)->stage_num_epochs();
  ASSERT_EQ(hint_epochs, 2);
  for (int64_t epoch = 0; epoch < hint_epochs; ++epoch) {
    ASSERT_THAT((*box)->PreEpoch(epoch), IsOk());
    auto loader = (*box)->TrainLoader();
    ASSERT_THAT(loader, IsOk());
    for (BatchStream batches(**loader); !batches.done();) {
      Batch batch = batches.Next();
      ASSERT_THAT((*box)->PreForward(batch), IsOk());
      auto loss = (*box)->Forward(batch);
      ASSERT_THAT(loss, IsOk());
      // The I/O dicts hold the chains' paths.
      auto student_io = (*box)->StudentIoDict();
      ASSERT_THAT(student_io, IsOk());
      EXPECT_EQ((*student_io)->at("layer1").at("output").toTensor().size(1), 4);
      ASSERT_THAT((*box)->PostForward(*loss), IsOk());
    }
    ASSERT_THAT((*box)->PostEpoch({}), IsOk());
  }
  // The student's stem and layer1 trained; its layer2 and head, outside the chain, did not.
  for (const auto& [name, t] : (*box)->student().NamedParameters()) {
    const bool in_chain = name.rfind("stem.", 0) == 0 || name.rfind("layer1.", 0) == 0;
    EXPECT_EQ(at::equal(t, before[name]), !in_chain) << name;
  }
  // The student (in training mode) ran only up to layer1: only those batch norms saw batches.
  for (const auto& [name, t] : (*box)->student().NamedBuffers()) {
    const bool in_chain = name.rfind("stem.", 0) == 0 || name.rfind("layer1.", 0) == 0;
    EXPECT_EQ(at::equal(t, buffers_before[name]), !in_chain) << name;
  }
  // The hint stage's last PostEpoch moved the box on to the next stage, as torchdistill's
  // multi-stage box does, writing the stage's dst_ckpt: the chain's state dict, torchdistill's
  // keys, the student's values.
  EXPECT_EQ((*box)->stage_index(), 1u);
  EXPECT_EQ((*box)->stage_start_epoch(), 2);
  EXPECT_EQ((*box)->num_epochs(), 3);  // the run's: 2 + 1
  auto written = ReadTorchFile(hint);
  ASSERT_THAT(written, IsOk());
  const c10::impl::GenericDict saved = written->toGenericDict();
  EXPECT_TRUE(saved.contains("stem.0.weight"));
  EXPECT_TRUE(saved.contains("layer1.1.running_mean"));
  EXPECT_FALSE(saved.contains("head.2.weight"));
  for (const auto& [name, t] : (*box)->student().NamedParameters()) {
    if (saved.contains(name)) {
      EXPECT_TRUE(at::equal(t, saved.at(name).toTensor())) << name;
    }
  }
}

TEST_F(BoxTest, AFitNetRunAndItsHandLoopAgree) {
  ExpectHandLoopEqualsRun(FitNetConfig(RunDir("fitnet_files2") + "/hint.pt"), "fitnet");
}

TEST_F(BoxTest, PathsOfASequentialStageAreTheChains) {
  // A hook outside the chain, and a chain module that does not exist: named with the nearest.
  std::string outside = FitNetConfig(RunDir("fitnet_bad") + "/h.pt");
  outside.replace(outside.find("forward_hooks { module_path: \"layer1\""),
                  std::string("forward_hooks { module_path: \"layer1\"").size(),
                  "forward_hooks { module_path: \"head\"");
  const std::string read = "source: TEACHER path: \"layer1\"";
  outside.replace(outside.find(read), read.size(), "source: TEACHER path: \"head\"");
  EXPECT_THAT(MakeBox(Parse(outside), {.run_dir = RunDir("fitnet_bad_run")}),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("no module \"head\" in this sequential model"),
                             HasSubstr("layer1.0"))));
  std::string unknown = FitNetConfig(RunDir("fitnet_bad2") + "/h.pt");
  unknown.replace(unknown.find("\"stem\", \"layer1\""), std::string("\"stem\", \"layer1\"").size(),
                  "\"stem\", \"layer9\"");
  EXPECT_THAT(MakeBox(Parse(unknown), {.run_dir = RunDir("fitnet_bad2_run")}),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("teacher.sequential"), HasSubstr("no module \"layer9\""),
                             HasSubstr("layer1"))));
}

// VID (torchdistill's VariationalDistributor4VID + VIDLoss): the student's layer1 through the
// Regressor4VID auxiliary module, whose (mean, variance) pair the loss reads by element; the
// regressor and its variance train with the student.
TEST_F(BoxTest, VidTrainsItsRegressorWithTheStudent) {
  constexpr char kVid[] = R"pb(
    teacher { forward_hooks { module_path: "layer1" requires_output: true } }
    student {
      forward_hooks { module_path: "layer1" requires_output: true }
      auxiliary_modules {
        name: "vid"
        key: "Regressor4VID"
        kwargs { name: "in_channels" integer: 4 }
        kwargs { name: "middle_channels" integer: 8 }
        kwargs { name: "out_channels" integer: 8 }
        kwargs { name: "eps" number: 1e-5 }
        kwargs { name: "init_pred_var" number: 5 }
        input { source: STUDENT path: "layer1" }
      }
    }
    criterion {
      terms {
        key: "CrossEntropyLoss"
        inputs { arg: "input" source: STUDENT }
        inputs { arg: "target" source: TARGETS }
      }
      terms {
        key: "VIDLoss"
        weight: 0.5
        inputs { arg: "pred_mean" source: STUDENT path: "vid" element: 0 }
        inputs { arg: "pred_var" source: STUDENT path: "vid" element: 1 }
        inputs { arg: "teacher" source: TEACHER path: "layer1" }
      }
    }
  )pb";
  const std::string dir = RunDir("vid");
  auto box = MakeBox(Parse(absl::StrCat(kImages, "train {", Stage("vid", 1, kVid), "}")),
                     {.run_dir = dir});
  ASSERT_THAT(box, IsOk());
  ASSERT_THAT((*box)->Run(), IsOk());
  auto last = ReadTorchFile(dir + "/ckpt/last.pt");
  ASSERT_THAT(last, IsOk());
  int found = 0;
  for (const auto& entry : last->toGenericDict().at("auxiliary_modules").toGenericDict()) {
    const std::string& name = entry.key().toStringRef();
    if (name.find("soft_plus_param") == std::string::npos) continue;
    ++found;
    // It started at softplus^-1(5 - eps) in every channel; the optimizer moved it.
    const at::Tensor start = at::full({8}, std::log(std::exp(5.0 - 1e-5) - 1.0));
    EXPECT_FALSE(at::allclose(entry.value().toTensor(), start)) << name;
  }
  EXPECT_EQ(found, 1);

  // Without `element` the pair is not a tensor: the message says how to pick one.
  std::string whole = absl::StrCat(kImages, "train {", Stage("vid", 1, kVid), "}");
  whole.replace(whole.find(" element: 0"), std::string(" element: 0").size(), "");
  auto unpicked = MakeBox(Parse(whole), {.run_dir = RunDir("vid_unpicked")});
  ASSERT_THAT(unpicked, IsOk());
  EXPECT_THAT((*unpicked)->Run(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("student io[\"vid\"][\"output\"] is a Tuple, not a tensor: "
                                 "pick one of its values with `element`")));
}

// Factor transfer as torchdistill's config has it: the teacher's paraphraser trained alone in a
// stage of its own (reconstructing the teacher's layer1), its weights carried to the next stage
// by its checkpoint file (torchdistill's paraphraser_ckpt), where it is frozen and gives the
// factor that the student's translator learns (FTLoss beside cross-entropy).
TEST_F(BoxTest, FactorTransferCarriesItsParaphraserToTheNextStage) {
  const std::string dir = RunDir("ft");
  const std::string paraphraser_ckpt = RunDir("ft_files") + "/paraphraser.pt";
  const std::string paraphraser = absl::StrCat(R"pb(
      name: "paraphraser"
      key: "Paraphraser4FactorTransfer"
      kwargs { name: "k" number: 0.5 }
      kwargs { name: "num_input_channels" integer: 8 }
      input { source: TEACHER path: "layer1" }
      ckpt: ")pb", paraphraser_ckpt, "\"");
  const std::string stage1 = absl::StrCat(
      R"pb(teacher { forward_hooks { module_path: "layer1" requires_output: true }
                     auxiliary_modules {)pb", paraphraser, R"pb(} }
           student { requires_grad: false }
           criterion { terms { key: "MSELoss"
                               inputs { arg: "input" source: TEACHER path: "paraphraser" }
                               inputs { arg: "target" source: TEACHER path: "layer1" } } })pb");
  const std::string stage2 = absl::StrCat(
      R"pb(teacher { forward_hooks { module_path: "layer1" requires_output: true }
                     auxiliary_modules {)pb", paraphraser,
      R"pb( kwargs { name: "uses_decoder" boolean: false } requires_grad: false } }
           student { forward_hooks { module_path: "layer1" requires_output: true }
                     auxiliary_modules { name: "translator" key: "Translator4FactorTransfer"
                                         kwargs { name: "num_input_channels" integer: 4 }
                                         kwargs { name: "num_output_channels" integer: 4 }
                                         input { source: STUDENT path: "layer1" } } }
           criterion { terms { key: "CrossEntropyLoss" inputs { arg: "input" source: STUDENT }
                               inputs { arg: "target" source: TARGETS } }
                       terms { key: "FTLoss"
                               inputs { arg: "student" source: STUDENT path: "translator" }
                               inputs { arg: "teacher" source: TEACHER path: "paraphraser" } } })pb");
  auto box = MakeBox(Parse(absl::StrCat(kImages, "stages {", Stage("paraphraser", 1, stage1),
                                        "} stages {", Stage("ft", 1, stage2), "}")),
                     {.run_dir = dir});
  ASSERT_THAT(box, IsOk());
  ASSERT_THAT((*box)->Run(), IsOk());
  // The paraphraser's weights at the end of its stage (that stage's checkpoint) are the file's
  // after the second stage: loaded from it there, and frozen.
  // Weights and batch-norm statistics alike: frozen beside a frozen teacher, it ran in eval mode
  // there.
  const int compared = ExpectAuxModuleIsFile(dir + "/ckpt/paraphraser.pt", "teacher.paraphraser.",
                                             paraphraser_ckpt);
  EXPECT_EQ(compared, 24 + 18);  // 12 weights and biases; 6 batch norms' three statistics
}

// Knowledge review (torchdistill's Student4KnowledgeReview + HierarchicalContextLoss): the
// student's stem, layer1 and layer2 maps fused deepest first, each fusion after the first reading
// the previous one's residual (extra_inputs, element 1); each fusion's output (element 0) matched
// to the teacher's map. The loss is the terms' sum on the recorded values, and every parameter the
// optimizer holds (the student's and all three fusions', attention included) gets a gradient.
TEST_F(BoxTest, KnowledgeReviewChainsItsFusions) {
  constexpr char kFusion[] = R"pb(
      auxiliary_modules {
        name: "abf_$PATH" key: "AttentionBasedFusion"
        kwargs { name: "in_channels" integer: $IN }
        kwargs { name: "mid_channels" integer: 8 }
        kwargs { name: "out_channels" integer: $OUT }
        $ATTENTION
        input { path: "$PATH" }
      })pb";
  auto fusion = [&](const std::string& path, int in, int out, const std::string& previous) {
    return absl::StrReplaceAll(
        kFusion, {{"$PATH", path},
                  {"$IN", absl::StrCat(in)},
                  {"$OUT", absl::StrCat(out)},
                  {"$ATTENTION", previous.empty()
                                     ? ""
                                     : absl::StrCat(R"pb(kwargs { name: "uses_attention" boolean: true }
                                                     extra_inputs { path: ")pb",
                                                    previous, R"pb(" element: 1 })pb")}});
  };
  std::string hooks, terms;
  for (const char* path : {"stem", "layer1", "layer2"}) {
    hooks += absl::StrCat("forward_hooks { module_path: \"", path, "\" requires_output: true } ");
    terms += absl::StrCat("terms { name: \"review_", path, "\" key: \"HierarchicalContextLoss\" ",
                          "inputs { arg: \"student\" source: STUDENT path: \"abf_", path,
                          "\" element: 0 } inputs { arg: \"teacher\" source: TEACHER path: \"",
                          path, "\" } } ");
  }
  const std::string stage = absl::StrCat(
      "teacher { ", hooks, "} student { forward_hooks { module_path: \"\" requires_output: true } ",
      hooks, fusion("layer2", 8, 16, ""),
      fusion("layer1", 4, 8, "abf_layer2"), fusion("stem", 4, 8, "abf_layer1"),
      " } criterion { terms { key: \"CrossEntropyLoss\" inputs { arg: \"input\" source: STUDENT } "
      "inputs { arg: \"target\" source: TARGETS } } ",
      terms, "}");
  auto box = MakeBox(Parse(absl::StrCat(kImages, "train {", Stage("kr", 1, stage), "}")),
                     {.run_dir = RunDir("kr")});
  ASSERT_THAT(box, IsOk());
  ASSERT_THAT((*box)->PreEpoch(0), IsOk());
  auto loader = (*box)->TrainLoader();
  ASSERT_THAT(loader, IsOk());
  BatchStream batches(**loader);
  Batch batch = batches.Next();
  ASSERT_THAT((*box)->PreForward(batch), IsOk());
  auto loss = (*box)->Forward(batch);
  ASSERT_THAT(loss, IsOk());

  auto student_io = (*box)->StudentIoDict();
  auto teacher_io = (*box)->TeacherIoDict();
  ASSERT_THAT(student_io, IsOk());
  ASSERT_THAT(teacher_io, IsOk());
  auto review = MakeLoss("HierarchicalContextLoss", {});
  ASSERT_THAT(review, IsOk());
  const at::Tensor logits = (*student_io)->at("").at("output").toTensor();
  at::Tensor expected =
      at::cross_entropy_loss(logits, batch.targets.toTensor(), {}, at::Reduction::Mean);
  for (const char* path : {"stem", "layer1", "layer2"}) {
    const auto fused = (*student_io)->at(absl::StrCat("abf_", path)).at("output").toTupleRef();
    const at::Tensor output = fused.elements()[0].toTensor();
    const at::Tensor teacher = (*teacher_io)->at(path).at("output").toTensor();
    ASSERT_EQ(output.sizes(), teacher.sizes()) << path;
    // The residual is the fusion's mid-width map at the student map's size.
    EXPECT_EQ(fused.elements()[1].toTensor().size(1), 8) << path;
    auto value = (*review)->Forward(LossInputs({{"student", output}, {"teacher", teacher}}));
    ASSERT_THAT(value, IsOk());
    expected = expected + *value;
  }
  EXPECT_TRUE(at::allclose(*loss, expected, 1e-5, 1e-6)) << *loss << " vs " << expected;

  loss->backward();
  auto optimizer = (*box)->Optimizer();
  ASSERT_THAT(optimizer, IsOk());
  int64_t params = 0;
  for (const auto& group : (*optimizer)->param_groups()) {
    for (const at::Tensor& p : group.params()) {
      ++params;
      ASSERT_TRUE(p.grad().defined());
      EXPECT_GT(p.grad().abs().sum().item<double>(), 0) << p.sizes();
    }
  }
  // The student's 14 and the fusions' 6, 8 and 8 (the deepest has no attention convolution).
  EXPECT_EQ(params, 14 + 6 + 8 + 8);
  box->reset();

  // The whole stage runs, and the run's checkpoint keeps the three fusions.
  const std::string dir = RunDir("kr_run");
  auto run = MakeBox(Parse(absl::StrCat(kImages, "train {", Stage("kr", 1, stage), "}")),
                     {.run_dir = dir});
  ASSERT_THAT(run, IsOk());
  ASSERT_THAT((*run)->Run(), IsOk());
  auto last = ReadTorchFile(dir + "/ckpt/last.pt");
  ASSERT_THAT(last, IsOk());
  int attention = 0;
  for (const auto& entry : last->toGenericDict().at("auxiliary_modules").toGenericDict()) {
    if (entry.key().toStringRef().find("attention_conv") != std::string::npos) ++attention;
  }
  EXPECT_EQ(attention, 4);  // abf_layer1's and abf_stem's weight and bias
}

// SSKD as torchdistill's config has it: the training samples in four rotations
// (SSKDDatasetWrapper) run through forward_batch4sskd; a first stage trains the teacher's
// self-supervision module alone (AuxSSKDLoss), kept by its checkpoint file; the second distils
// the student with SSKDLoss, the teacher's module loaded from the file and frozen.
TEST_F(BoxTest, SskdTrainsTheTeachersModuleThenTheStudent) {
  const std::string dir = RunDir("sskd");
  const std::string ss_ckpt = RunDir("sskd_files") + "/teacher_ss.pt";
  std::string images = kImages;
  const std::string train = "id: \"train\"\n    key: \"synthetic\"";
  ASSERT_NE(images.find(train), std::string::npos);
  images.replace(images.find(train), train.size(),
                 train + " wrapper { key: \"SSKDDatasetWrapper\" }");
  const std::string teacher_ss = absl::StrCat(
      R"pb(auxiliary_modules { name: "ss" key: "SSWrapper4SSKD"
                               kwargs { name: "feat_dim" integer: 784 }
                               input { path: "layer2" } ckpt: ")pb",
      ss_ckpt, "\"");
  const std::string stage1 = absl::StrCat(
      R"pb(teacher { forward_proc { key: "forward_batch4sskd" }
                     forward_hooks { module_path: "layer2" requires_output: true } )pb",
      teacher_ss, R"pb( } }
           student { forward_proc { key: "forward_batch4sskd" } requires_grad: false }
           criterion { terms { key: "AuxSSKDLoss" inputs { arg: "ss" source: TEACHER path: "ss" } } })pb");
  const std::string stage2 = absl::StrCat(
      R"pb(teacher { forward_proc { key: "forward_batch4sskd" }
                     forward_hooks { module_path: "layer2" requires_output: true } )pb",
      teacher_ss, R"pb( requires_grad: false } }
           student { forward_proc { key: "forward_batch4sskd" }
                     forward_hooks { module_path: "layer2" requires_output: true }
                     auxiliary_modules { name: "ss" key: "SSWrapper4SSKD"
                                         kwargs { name: "feat_dim" integer: 392 }
                                         input { path: "layer2" } } }
           criterion { terms { key: "SSKDLoss"
                               kwargs { name: "kl_temp" number: 4 }
                               kwargs { name: "ss_temp" number: 0.5 }
                               kwargs { name: "tf_temp" number: 4 }
                               kwargs { name: "ss_ratio" number: 0.75 }
                               kwargs { name: "tf_ratio" number: 1 }
                               kwargs { name: "loss_weights" numbers { values: [ 1, 0.9, 10, 2.7 ] } }
                               inputs { arg: "student_linear" source: STUDENT }
                               inputs { arg: "teacher_linear" source: TEACHER }
                               inputs { arg: "student_ss" source: STUDENT path: "ss" }
                               inputs { arg: "teacher_ss" source: TEACHER path: "ss" }
                               inputs { arg: "targets" source: TARGETS } } })pb");
  auto box = MakeBox(Parse(absl::StrCat(images, "stages {", Stage("ss", 1, stage1), "} stages {",
                                        Stage("sskd", 1, stage2), "}")),
                     {.run_dir = dir});
  ASSERT_THAT(box, IsOk());
  ASSERT_THAT((*box)->PreEpoch(0), IsOk());
  auto loader = (*box)->TrainLoader();
  ASSERT_THAT(loader, IsOk());
  BatchStream batches(**loader);
  Batch batch = batches.Next();
  // 32 samples in four views: the teacher ran on 128 rows.
  ASSERT_EQ(batch.samples.toTensor().sizes(), at::IntArrayRef({32, 4, 1, 28, 28}));
  ASSERT_THAT((*box)->PreForward(batch), IsOk());
  auto loss = (*box)->Forward(batch);
  ASSERT_THAT(loss, IsOk());
  auto teacher_io = (*box)->TeacherIoDict();
  ASSERT_THAT(teacher_io, IsOk());
  EXPECT_EQ((*teacher_io)->at("ss").at("output").toTensor().sizes(), at::IntArrayRef({128, 784}));
  box->reset();

  auto run = MakeBox(Parse(absl::StrCat(images, "stages {", Stage("ss", 1, stage1), "} stages {",
                                        Stage("sskd", 1, stage2), "}")),
                     {.run_dir = dir, .overwrite = true});
  ASSERT_THAT(run, IsOk());
  ASSERT_THAT((*run)->Run(), IsOk());
  // The teacher's module ends the second stage as the first left it in its file: frozen there.
  const int compared = ExpectAuxModuleIsFile(dir + "/ckpt/last.pt", "teacher.ss.", ss_ckpt);
  EXPECT_EQ(compared, 4);  // two linears' weights and biases: "0.*", "2.*"
}

// CRD as torchdistill configures it: the training set in CRDDatasetWrapper (each sample's
// pos_idx and contrast_idx in the batch), both models' maps through Linear4CRD embeddings (the
// teacher's trains beside the frozen teacher), CRDLoss reading pos_idx and contrast_idx from the
// batch (source BATCH). One step updates the memory banks' rows of exactly the batch's samples.
TEST_F(BoxTest, CrdReadsTheBatchsIndicesIntoItsMemoryBanks) {
  constexpr char kCrd[] = R"pb(
    teacher {
      forward_hooks { module_path: "layer2" requires_output: true }
      auxiliary_modules { name: "embed" key: "Linear4CRD"
                          kwargs { name: "in_features" integer: 784 }
                          kwargs { name: "out_features" integer: 16 }
                          input { path: "layer2" } }
    }
    student {
      forward_hooks { module_path: "layer2" requires_output: true }
      auxiliary_modules { name: "embed" key: "Linear4CRD"
                          kwargs { name: "in_features" integer: 392 }
                          kwargs { name: "out_features" integer: 16 }
                          input { path: "layer2" } }
    }
    criterion {
      terms { key: "CrossEntropyLoss" inputs { arg: "input" source: STUDENT }
              inputs { arg: "target" source: TARGETS } }
      terms { name: "crd" key: "CRDLoss" weight: 0.8
              kwargs { name: "input_size" integer: 16 }
              kwargs { name: "output_size" integer: 96 }
              kwargs { name: "num_negative_samples" integer: 8 }
              kwargs { name: "num_samples" integer: 96 }
              inputs { arg: "student" source: STUDENT path: "embed" }
              inputs { arg: "teacher" source: TEACHER path: "embed" }
              inputs { arg: "pos_idx" source: BATCH path: "pos_idx" }
              inputs { arg: "contrast_idx" source: BATCH path: "contrast_idx" } }
    }
  )pb";
  std::string images = kImages;
  const std::string train = "id: \"train\"\n    key: \"synthetic\"";
  ASSERT_NE(images.find(train), std::string::npos);
  images.replace(images.find(train), train.size(),
                 train + R"pb( wrapper { key: "CRDDatasetWrapper"
                                         kwargs { name: "num_negative_samples" integer: 8 } })pb");
  auto box = MakeBox(Parse(absl::StrCat(images, "train {", Stage("crd", 1, kCrd), "}")),
                     {.run_dir = RunDir("crd")});
  ASSERT_THAT(box, IsOk());
  ASSERT_THAT((*box)->PreEpoch(0), IsOk());
  auto criterion = (*box)->StageCriterion();
  ASSERT_THAT(criterion, IsOk());
  auto bank = [&] {
    for (const auto& [name, tensor] : (*criterion)->NamedState()) {
      if (name == "crd/memory_v1") return tensor.clone();
    }
    ADD_FAILURE() << "no crd/memory_v1";
    return at::Tensor();
  };
  const at::Tensor before = bank();
  auto loader = (*box)->TrainLoader();
  ASSERT_THAT(loader, IsOk());
  BatchStream batches(**loader);
  Batch batch = batches.Next();
  ASSERT_THAT((*box)->PreForward(batch), IsOk());
  auto loss = (*box)->Forward(batch);
  ASSERT_THAT(loss, IsOk());
  const at::Tensor changed = ((bank() - before).abs().sum(1) > 0).nonzero().flatten();
  const auto supp = c10::impl::toTypedDict<std::string, at::Tensor>(batch.supp.toGenericDict());
  // torchdistill's "exact" mode: each sample is its own positive.
  EXPECT_TRUE(at::equal(supp.at("pos_idx"), supp.at("indices")));
  EXPECT_EQ(supp.at("contrast_idx").sizes(), at::IntArrayRef({32, 9}));
  EXPECT_TRUE(at::equal(changed, std::get<0>(at::sort(supp.at("pos_idx")))));
  ASSERT_THAT((*box)->PostForward(*loss), IsOk());
}

}  // namespace
}  // namespace kd
