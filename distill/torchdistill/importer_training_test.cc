// torchdistill YAML imported and trained: the main job's three configs, written in
// torchdistill's YAML, train to the originals' weights; attention transfer (its pairs one term
// each) trains as the hand-written libkd config does; every method with an import rule trains
// a stand-in pair for an epoch.
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/file_util.h"
#include "base/torch_file.h"
#include "distill/boxes/box.h"
#include "distill/boxes/testing/box_test_fixture.h"
#include "distill/boxes/model_paths.h"
#include "distill/config/config_loader.h"
#include "distill/torchdistill/import_test_util.h"
#include "distill/torchdistill/importer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hooks/model.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace torchdistill {
namespace {

using ::kd::test::BoxTest;
using ::kd::test::ExpectSameStudent;
using ::kd::test::RunDir;
using test::ExpectSameConfig;
using test::Original;
using test::TestData;
using test::WithoutRoots;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// The 64 fixture images (48 to train, 16 to validate) for configs written for Fashion-MNIST.
DistillConfig OnFixtureImages(DistillConfig config) {
  config = WithoutRoots(config);
  config.clear_test_data_loader();
  config.mutable_datasets()->RemoveLast();  // the test split: not in the fixture
  for (DatasetConfig& dataset : *config.mutable_datasets()) {
    Kwarg* root = dataset.add_kwargs();
    root->set_name("root");
    root->set_str(::kd::test::FixturePath("amp_data"));
    const bool train = dataset.id() == "train";
    dataset.mutable_subset()->set_start(train ? 0 : 48);
    dataset.mutable_subset()->set_stop(train ? 48 : 64);
  }
  config.mutable_train()->set_num_epochs(1);
  config.mutable_train()->mutable_train_data_loader()->set_batch_size(8);
  return config;
}

void RunIn(const DistillConfig& config, const std::string& dir) {
  absl::StatusOr<std::unique_ptr<Box>> box = MakeBox(config, {.run_dir = dir});
  ASSERT_THAT(box, IsOk());
  ASSERT_THAT((*box)->Run(), IsOk());
}

// Runs a two-stage config's first stage alone, then both (the same first stage: one thread, the
// same seed), the teacher's auxiliary module `module` kept in its checkpoint file each time, and
// expects the two-stage run's module to be what the first stage alone left in its file: the
// second stage left it as it was. Returns how many tensors it compared.
int TeachersModuleKeepsItsFirstStage(DistillConfig config, const std::string& name,
                                     const std::string& module) {
  const std::string first = RunDir(name + "_first"), dir = RunDir(name);
  DistillConfig first_only = config;
  first_only.mutable_stages()->RemoveLast();
  first_only.mutable_stages(0)->mutable_teacher()->mutable_auxiliary_modules(0)->set_ckpt(
      first + "/module.pt");
  RunIn(first_only, first);
  for (StageConfig& stage : *config.mutable_stages()) {
    stage.mutable_teacher()->mutable_auxiliary_modules(0)->set_ckpt(dir + "/module.pt");
  }
  RunIn(config, dir);
  return ::kd::test::ExpectAuxModuleIsFile(dir + "/ckpt/last.pt", "teacher." + module + ".",
                                           first + "/module.pt");
}

TEST_F(BoxTest, TheImportedConfigsTrainToTheOriginalsWeights) {
  for (const std::string name : {"teacher", "student", "student_kd"}) {
    SCOPED_TRACE(name);
    // Against libkd's own configs: libkd's teacher mode (eval), as they run it.
    absl::StatusOr<Import> imported = ImportFile(
        TestData(name + ".yaml"), {.seed = 1, .teacher_mode = StageConfig::TEACHER_EVAL});
    ASSERT_THAT(imported, IsOk());
    const std::string from_yaml = RunDir(name + "_yaml"), original = RunDir(name + "_original");
    RunIn(OnFixtureImages(imported->config), from_yaml);
    RunIn(OnFixtureImages(Original("fashion_mnist_" + name + ".pbtxt")), original);
    ExpectSameStudent(from_yaml, original);
  }
}

TEST_F(BoxTest, AttentionTransferPairsTrainAsTheHandWrittenConfig) {
  absl::StatusOr<Import> imported =
      ImportFile(TestData("at.yaml"), {.seed = 1, .teacher_mode = StageConfig::TEACHER_EVAL});
  ASSERT_THAT(imported, IsOk());
  EXPECT_THAT(imported->unsupported, IsEmpty());
  const CriterionConfig& criterion = imported->config.train().criterion();
  ASSERT_EQ(criterion.terms_size(), 3);
  EXPECT_EQ(criterion.terms(1).name(), "at_loss_pair1");
  EXPECT_EQ(criterion.terms(1).weight(), 1000);  // the sub-term's weight times the pair's
  EXPECT_EQ(criterion.terms(2).weight(), 500);
  absl::StatusOr<LoadedConfig> by_hand = LoadConfig(TestData("at.pbtxt"));
  ASSERT_THAT(by_hand, IsOk());
  ExpectSameConfig(imported->config, by_hand->config);
  const std::string from_yaml = RunDir("at_yaml"), hand = RunDir("at_hand");
  RunIn(imported->config, from_yaml);
  RunIn(by_hand->config, hand);
  ExpectSameStudent(from_yaml, hand);
}

// CCKD as torchdistill's sample configures it: Linear4CCKD wrappers on both models (paths under
// "model.", the wrapper's "linear" hooked), the teacher's model frozen while its linear trains.
// libkd: the models as they are, each with an auxiliary module "linear" on its layer2, the
// teacher without requires_grad; the run trains and checkpoints both linears.
TEST_F(BoxTest, WrappedModelsBecomeAuxiliaryModules) {
  absl::StatusOr<Import> imported = ImportFile(TestData("cckd.yaml"), {.seed = 1});
  ASSERT_THAT(imported, IsOk());
  EXPECT_THAT(imported->unsupported, IsEmpty());
  const StageConfig& stage = imported->config.train();
  for (const StageModelConfig* model : {&stage.teacher(), &stage.student()}) {
    ASSERT_EQ(model->auxiliary_modules_size(), 1);
    const AuxiliaryModuleConfig& linear = model->auxiliary_modules(0);
    EXPECT_EQ(linear.name(), "linear");
    EXPECT_EQ(linear.key(), "Linear4CCKD");
    EXPECT_EQ(linear.input().path(), "layer2");
    ASSERT_EQ(model->forward_hooks_size(), 1);  // "linear" is the module's own output
    EXPECT_EQ(model->forward_hooks(0).module_path(), "layer2");
    EXPECT_EQ(model->frozen_modules_size(), 0);
  }
  EXPECT_FALSE(stage.teacher().has_requires_grad());  // libkd's default for a teacher: false
  EXPECT_EQ(stage.teacher().auxiliary_modules(0).kwargs(0).integer(), 784);
  const LossTermConfig& cckd = stage.criterion().terms(1);
  EXPECT_EQ(cckd.inputs(0).path(), "linear");
  const std::string dir = RunDir("cckd");
  RunIn(imported->config, dir);
  // Both linears checkpointed with the run's auxiliary modules.
  absl::StatusOr<c10::IValue> last = ReadTorchFile(dir + "/ckpt/last.pt");
  ASSERT_THAT(last, IsOk());
  int linears = 0;
  for (const auto& entry : last->toGenericDict().at("auxiliary_modules").toGenericDict()) {
    if (entry.key().toStringRef().find("linear") != std::string::npos) ++linears;
  }
  EXPECT_GE(linears, 4);  // teacher's and student's weight and bias
}

// VID as torchdistill's sample configures it: a VariationalDistributor4VID wrapper on the
// student (paths under student_model., its regressors under regressor_dict.), VIDLoss pairs
// reading a regressor's output. libkd: a Regressor4VID auxiliary module per regressor on its
// layer, each pair a VIDLoss term reading the module's mean and variance by element.
TEST_F(BoxTest, VidsRegressorsBecomeAuxiliaryModules) {
  absl::StatusOr<Import> imported = ImportFile(TestData("vid.yaml"), {.seed = 1});
  ASSERT_THAT(imported, IsOk());
  EXPECT_THAT(imported->unsupported, IsEmpty());
  const StageConfig& stage = imported->config.train();
  ASSERT_EQ(stage.student().auxiliary_modules_size(), 2);
  const AuxiliaryModuleConfig& regressor = stage.student().auxiliary_modules(1);
  EXPECT_EQ(regressor.name(), "regressor2");
  EXPECT_EQ(regressor.key(), "Regressor4VID");
  EXPECT_EQ(regressor.input().path(), "layer2");
  ASSERT_EQ(stage.student().forward_hooks_size(), 2);  // layer1, layer2; the regressors' own
  EXPECT_EQ(stage.student().forward_hooks(1).module_path(), "layer2");
  const LossTermConfig& pair2 = stage.criterion().terms(2);
  EXPECT_EQ(pair2.name(), "vid_pair2");
  ASSERT_EQ(pair2.inputs_size(), 3);
  EXPECT_EQ(pair2.inputs(0).arg(), "pred_mean");
  EXPECT_EQ(pair2.inputs(0).path(), "regressor2");
  EXPECT_EQ(pair2.inputs(0).element(), 0);
  EXPECT_EQ(pair2.inputs(1).arg(), "pred_var");
  EXPECT_EQ(pair2.inputs(1).element(), 1);
  EXPECT_EQ(pair2.inputs(2).source(), IoRef::TEACHER);
  EXPECT_EQ(pair2.inputs(2).path(), "layer2");
  EXPECT_THAT(imported->notes, Contains(HasSubstr("margin: ignored")));
  RunIn(imported->config, RunDir("vid"));
}

// PAD's second stage as torchdistill's sample configures it: a VarianceBranch4PAD wrapper on the
// student with its checkpoint file, PADL2Loss on the embeddings and the estimator's output.
TEST_F(BoxTest, PadsVarianceBranchBecomesAnAuxiliaryModule) {
  absl::StatusOr<Import> imported = ImportFile(TestData("pad.yaml"), {.seed = 1});
  ASSERT_THAT(imported, IsOk());
  EXPECT_THAT(imported->unsupported, IsEmpty());
  const StageConfig& stage = imported->config.train();
  ASSERT_EQ(stage.student().auxiliary_modules_size(), 1);
  const AuxiliaryModuleConfig& branch = stage.student().auxiliary_modules(0);
  EXPECT_EQ(branch.name(), "var_estimator");
  EXPECT_EQ(branch.key(), "VarianceBranch4PAD");
  EXPECT_EQ(branch.input().path(), "head");
  EXPECT_EQ(branch.ckpt(), "var_estimator.pt");
  const LossTermConfig& pad = stage.criterion().terms(1);
  ASSERT_EQ(pad.inputs_size(), 3);
  EXPECT_EQ(pad.inputs(0).path(), "head");
  EXPECT_EQ(pad.inputs(1).source(), IoRef::TEACHER);
  EXPECT_EQ(pad.inputs(2).arg(), "log_variances");
  EXPECT_EQ(pad.inputs(2).path(), "var_estimator");
  DistillConfig config = imported->config;
  const std::string dir = RunDir("pad");
  config.mutable_train()->mutable_student()->mutable_auxiliary_modules(0)->set_ckpt(
      dir + "/var_estimator.pt");
  RunIn(config, dir);
  EXPECT_TRUE(std::filesystem::exists(dir + "/var_estimator.pt"));  // the estimator kept
}

// SRD as torchdistill's sample configures it: SRDModelWrapper on both models (left out: nothing
// reads its projector), SRDLoss on the models' own layer2 features and logits.
TEST_F(BoxTest, SrdImportsWithoutItsUnreadProjector) {
  absl::StatusOr<Import> imported = ImportFile(TestData("srd.yaml"), {.seed = 1});
  ASSERT_THAT(imported, IsOk());
  EXPECT_THAT(imported->unsupported, IsEmpty());
  EXPECT_THAT(imported->notes, Contains(HasSubstr("SRDModelWrapper: left out: its projector's")));
  const StageConfig& stage = imported->config.train();
  EXPECT_EQ(stage.student().auxiliary_modules_size(), 0);
  EXPECT_EQ(stage.student().forward_hooks(0).module_path(), "layer2");
  const LossTermConfig& srd = stage.criterion().terms(1);
  ASSERT_EQ(srd.inputs_size(), 4);
  EXPECT_EQ(srd.inputs(0).path(), "");  // the logits: the model's output
  EXPECT_EQ(srd.inputs(2).arg(), "student_features");
  EXPECT_EQ(srd.inputs(2).path(), "layer2");
  EXPECT_EQ(srd.inputs(3).source(), IoRef::TEACHER);
  RunIn(imported->config, RunDir("srd"));
}

// ICKD as torchdistill's sample configures it: a Student4ICKD wrapper (an embedding per entry,
// its kwargs inline) and ChSimLoss pairs on the embeddings.
TEST_F(BoxTest, IckdsEmbeddingsBecomeAuxiliaryModules) {
  absl::StatusOr<Import> imported = ImportFile(TestData("ickd.yaml"), {.seed = 1});
  ASSERT_THAT(imported, IsOk());
  EXPECT_THAT(imported->unsupported, IsEmpty());
  const StageConfig& stage = imported->config.train();
  ASSERT_EQ(stage.student().auxiliary_modules_size(), 1);
  const AuxiliaryModuleConfig& embed = stage.student().auxiliary_modules(0);
  EXPECT_EQ(embed.name(), "embed1");
  EXPECT_EQ(embed.key(), "ChannelSimilarityEmbed");
  EXPECT_EQ(embed.input().path(), "layer2");
  ASSERT_EQ(embed.kwargs_size(), 2);
  EXPECT_EQ(embed.kwargs(1).integer(), 16);
  const LossTermConfig& pair = stage.criterion().terms(1);
  EXPECT_EQ(pair.name(), "ickd_pair1");
  EXPECT_EQ(pair.weight(), 500);
  EXPECT_EQ(pair.inputs(0).path(), "embed1");
  RunIn(imported->config, RunDir("ickd"));
}

// DAB's first stage as torchdistill's sample configures it: Connector4DAB's connectors (their
// conv2d_kwargs flat, bn2d_kwargs as uses_bn) and AltActTransferLoss pairs on them.
TEST_F(BoxTest, DabsConnectorsBecomeAuxiliaryModules) {
  absl::StatusOr<Import> imported = ImportFile(TestData("dab.yaml"), {.seed = 1});
  ASSERT_THAT(imported, IsOk());
  EXPECT_THAT(imported->unsupported, IsEmpty());
  const AuxiliaryModuleConfig& connector = imported->config.train().student().auxiliary_modules(0);
  EXPECT_EQ(connector.name(), "connector1");
  EXPECT_EQ(connector.key(), "Connector4DAB");
  EXPECT_EQ(connector.input().path(), "layer2");
  std::vector<std::string> kwargs;
  for (const Kwarg& k : connector.kwargs()) kwargs.push_back(k.name());
  EXPECT_THAT(kwargs, ElementsAre("uses_bn", "in_channels", "out_channels", "kernel_size", "stride",
                                  "padding", "bias"));
  EXPECT_EQ(imported->config.train().criterion().terms(1).inputs(0).path(), "connector1");
  RunIn(imported->config, RunDir("dab"));
}

// FitNet's first stage as torchdistill's sample configures it: the student trimmed by a
// sequential ending in a ConvReg adaptation, MSELoss between its output and the teacher's
// trimmed layer. libkd: the trimmed model, ConvReg an auxiliary module on its last module's
// output (hooked for it), the term reading the module by its name.
TEST_F(BoxTest, FitNetsAdaptationBecomesAnAuxiliaryModule) {
  absl::StatusOr<Import> imported = ImportFile(TestData("fitnet.yaml"), {.seed = 1});
  ASSERT_THAT(imported, IsOk());
  EXPECT_THAT(imported->unsupported, IsEmpty());
  const StageModelConfig& student = imported->config.train().student();
  EXPECT_THAT(student.sequential(), ElementsAre("stem", "layer1"));
  ASSERT_EQ(student.auxiliary_modules_size(), 1);
  const AuxiliaryModuleConfig& reg = student.auxiliary_modules(0);
  EXPECT_EQ(reg.name(), "convreg");
  EXPECT_EQ(reg.key(), "ConvReg");
  EXPECT_EQ(reg.input().path(), "layer1");
  EXPECT_EQ(reg.input().io(), IoRef::OUTPUT);
  std::vector<std::string> kwargs;
  for (const Kwarg& k : reg.kwargs()) kwargs.push_back(k.name());
  EXPECT_THAT(kwargs, ElementsAre("num_input_channels", "num_output_channels", "kernel_size",
                                  "stride", "padding", "uses_relu"));
  ASSERT_EQ(student.forward_hooks_size(), 1);  // layer1's output, for the module; not "+convreg"
  EXPECT_EQ(student.forward_hooks(0).module_path(), "layer1");
  EXPECT_TRUE(student.forward_hooks(0).requires_output());
  const LossTermConfig& hint = imported->config.train().criterion().terms(0);
  EXPECT_EQ(hint.inputs(0).path(), "convreg");
  EXPECT_EQ(hint.inputs(1).source(), IoRef::TEACHER);
  EXPECT_EQ(hint.inputs(1).path(), "layer1");
  RunIn(imported->config, RunDir("fitnet"));
}

// CRD as torchdistill's sample configures it: the loader's CRDDatasetWrapper, Linear4CRD
// wrappers (the student's "empty" module, whose input is the batch's indices), CRDLoss on the
// normalizers. libkd: the dataset wrapped, a Linear4CRD module "normalizer" on each model, the
// term reading pos_idx and contrast_idx from the batch.
TEST_F(BoxTest, CrdsWrappersAndIndicesImport) {
  absl::StatusOr<Import> imported = ImportFile(TestData("crd.yaml"), {.seed = 1});
  ASSERT_THAT(imported, IsOk());
  EXPECT_THAT(imported->unsupported, IsEmpty());
  EXPECT_EQ(imported->config.datasets(0).wrapper().key(), "CRDDatasetWrapper");
  const StageConfig& stage = imported->config.train();
  EXPECT_EQ(stage.student().auxiliary_modules(0).name(), "normalizer");
  EXPECT_EQ(stage.student().forward_hooks_size(), 1);  // layer2; not the wrapper's empty module
  const LossTermConfig& crd = stage.criterion().terms(1);
  ASSERT_EQ(crd.inputs_size(), 4);
  EXPECT_EQ(crd.inputs(0).path(), "normalizer");
  EXPECT_EQ(crd.inputs(2).source(), IoRef::BATCH);
  EXPECT_EQ(crd.inputs(2).path(), "pos_idx");
  EXPECT_EQ(crd.inputs(3).path(), "contrast_idx");
  RunIn(imported->config, RunDir("crd"));
}

// Factor transfer as torchdistill's sample configures it, two stages: the paraphraser trained on
// the trimmed, frozen teacher (a reconstruction loss), then the student's translator against it;
// the paraphraser's checkpoint file carries it from one stage to the next.
TEST_F(BoxTest, FactorTransfersStagesImport) {
  // The fixture teacher in train mode (torchdistill's AS_IS) diverges on these few images: the
  // stages are checked with libkd's eval-mode teacher.
  absl::StatusOr<Import> imported =
      ImportFile(TestData("ft.yaml"), {.seed = 1, .teacher_mode = StageConfig::TEACHER_EVAL});
  ASSERT_THAT(imported, IsOk());
  EXPECT_THAT(imported->unsupported, IsEmpty());
  ASSERT_EQ(imported->config.stages_size(), 2);
  DistillConfig config = imported->config;
  const StageModelConfig& teacher1 = config.stages(0).teacher();
  EXPECT_THAT(teacher1.sequential(), ElementsAre("stem", "layer1", "layer2"));
  EXPECT_FALSE(teacher1.has_requires_grad());  // the wrapped teacher frozen, its module trains
  EXPECT_EQ(teacher1.auxiliary_modules(0).key(), "Paraphraser4FactorTransfer");
  EXPECT_EQ(teacher1.auxiliary_modules(0).input().path(), "layer2");
  // the second stage's teacher frozen whole (requires_grad: False): its paraphraser too
  EXPECT_FALSE(teacher1.auxiliary_modules(0).has_requires_grad());
  ASSERT_TRUE(config.stages(1).teacher().auxiliary_modules(0).has_requires_grad());
  EXPECT_FALSE(config.stages(1).teacher().auxiliary_modules(0).requires_grad());
  EXPECT_EQ(config.stages(1).student().auxiliary_modules(0).key(), "Translator4FactorTransfer");
  const LossTermConfig& ft = config.stages(1).criterion().terms(1);
  EXPECT_EQ(ft.inputs(0).path(), "translator");
  EXPECT_EQ(ft.inputs(1).path(), "paraphraser");
  // The paraphraser ends the second stage as the first left it, frozen there.
  EXPECT_GT(TeachersModuleKeepsItsFirstStage(config, "ft", "paraphraser"), 0);
}

// SSKD as torchdistill's sample configures it, two stages: the teacher's SSWrapper4SSKD trained
// on the frozen teacher (AuxSSKDLoss) and kept by its checkpoint file, then the student's
// against it with SSKDLoss, the teacher's module frozen (its stage's requires_grad: False; its
// freezes_ss_module left out); samples in four rotations (SSKDDatasetWrapper).
TEST_F(BoxTest, SskdsStagesImport) {
  absl::StatusOr<Import> imported = ImportFile(TestData("sskd.yaml"), {.seed = 1});
  ASSERT_THAT(imported, IsOk());
  EXPECT_THAT(imported->unsupported, IsEmpty());
  EXPECT_THAT(imported->notes, Contains(HasSubstr("freezes_ss_module: left out")));
  DistillConfig config = imported->config;
  ASSERT_EQ(config.stages_size(), 2);
  EXPECT_EQ(config.datasets(0).wrapper().key(), "SSKDDatasetWrapper");
  const StageModelConfig& teacher1 = config.stages(0).teacher();
  EXPECT_EQ(teacher1.forward_proc().key(), "forward_batch4sskd");
  EXPECT_FALSE(teacher1.has_requires_grad());  // the wrapped teacher frozen, its module trains
  ASSERT_EQ(teacher1.auxiliary_modules_size(), 1);
  const AuxiliaryModuleConfig& ss = teacher1.auxiliary_modules(0);
  EXPECT_EQ(ss.name(), "ss_module");
  EXPECT_EQ(ss.key(), "SSWrapper4SSKD");
  EXPECT_EQ(ss.input().path(), "layer2");
  EXPECT_FALSE(ss.has_requires_grad());
  EXPECT_EQ(ss.ckpt(), "teacher_ss_module.pt");
  EXPECT_EQ(config.stages(0).student().requires_grad(), false);
  const LossTermConfig& aux = config.stages(0).criterion().terms(0);
  EXPECT_EQ(aux.key(), "AuxSSKDLoss");
  EXPECT_EQ(aux.inputs(0).source(), IoRef::TEACHER);
  EXPECT_EQ(aux.inputs(0).path(), "ss_module");
  // the second stage: the teacher's module frozen, the student's training
  EXPECT_FALSE(config.stages(1).teacher().auxiliary_modules(0).requires_grad());
  EXPECT_FALSE(config.stages(1).student().auxiliary_modules(0).has_requires_grad());
  const LossTermConfig& sskd = config.stages(1).criterion().terms(0);
  EXPECT_EQ(sskd.key(), "SSKDLoss");
  std::vector<std::string> inputs;
  for (const IoRef& in : sskd.inputs()) {
    inputs.push_back(absl::StrCat(in.arg(), "=", IoRef::Source_Name(in.source()), ":", in.path()));
  }
  EXPECT_THAT(inputs, ElementsAre("student_linear=STUDENT:head", "teacher_linear=TEACHER:head",
                                  "student_ss=STUDENT:ss_module", "teacher_ss=TEACHER:ss_module",
                                  "targets=TARGETS:"));
  // The teacher's module ends the second stage as the first left it; the student's trains.
  EXPECT_EQ(TeachersModuleKeepsItsFirstStage(config, "sskd", "ss_module"),
            4);  // two linears' weights and biases
}

// The module paths of the model `config` builds, for torchdistill's negative indices (as
// //tools:import_torchdistill gives them).
std::vector<std::string> ModulePaths(const ModelConfig& config) {
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(config, "", "model");
  EXPECT_THAT(model, IsOk());
  std::vector<std::string> paths;
  if (model.ok()) {
    for (const ModuleInfo& m : (*model)->NamedModules()) paths.push_back(m.path);
  }
  return paths;
}

// Knowledge review as torchdistill's sample configures it: a Student4KnowledgeReview wrapper
// whose fusions, listed shallow to deep, run deep to shallow (abf_modules.0 is the deepest, with
// no residual; each next one takes the previous one's residual, resized to its `sizes` entry,
// and attention), HierarchicalContextLoss on each fusion's output (a pair: element 0) and the
// teacher's feature; paths with negative indices ("layer2.-1": layer2's last module).
TEST_F(BoxTest, KnowledgeReviewsFusionsChainDeepestFirst) {
  absl::StatusOr<Import> imported =
      ImportFile(TestData("kr.yaml"), {.seed = 1, .module_paths = ModulePaths});
  ASSERT_THAT(imported, IsOk());
  EXPECT_THAT(imported->unsupported, IsEmpty());
  const StageModelConfig& student = imported->config.train().student();
  ASSERT_EQ(student.auxiliary_modules_size(), 3);
  std::vector<std::string> chain;
  for (const AuxiliaryModuleConfig& m : student.auxiliary_modules()) {
    std::string kwargs;
    for (const Kwarg& k : m.kwargs()) {
      absl::StrAppend(
          &kwargs, " ", k.name(), "=",
          k.has_boolean() ? (k.boolean() ? "true" : "false") : absl::StrCat(k.integer()));
    }
    chain.push_back(absl::StrCat(
        m.name(), " ", m.key(), " on ", m.input().path(),
        m.extra_inputs_size() > 0
            ? absl::StrCat(" and ", m.extra_inputs(0).path(), "[", m.extra_inputs(0).element(), "]")
            : "",
        ":", kwargs));
  }
  EXPECT_THAT(chain,
              ElementsAre("abf0 AttentionBasedFusion on layer2.6: in_channels=8 mid_channels=16 "
                          "out_channels=16",
                          "abf1 AttentionBasedFusion on layer1.2 and abf0[1]: in_channels=4 "
                          "mid_channels=16 out_channels=8 uses_attention=true size=14",
                          "abf2 AttentionBasedFusion on stem.2 and abf1[1]: in_channels=4 "
                          "mid_channels=16 out_channels=8 uses_attention=true size=14"));
  const LossTermConfig& stem = imported->config.train().criterion().terms(1);
  EXPECT_EQ(stem.key(), "HierarchicalContextLoss");
  EXPECT_EQ(stem.inputs(0).path(), "abf2");
  EXPECT_EQ(stem.inputs(0).element(), 0);
  EXPECT_EQ(stem.inputs(1).path(), "stem.2");
  RunIn(imported->config, RunDir("kr"));

  // torchdistill's sample writes the fusions' kwargs as in_channel, mid_channel, out_channel
  // (which torchdistill 1.1.5's AttentionBasedFusion refuses): taken as the same, with notes.
  std::string text = *ReadFile(TestData("kr.yaml"));
  for (const char* name : {"in_channel", "mid_channel", "out_channel"}) {
    text = absl::StrReplaceAll(text, {{absl::StrCat(name, "s:"), absl::StrCat(name, ":")}});
  }
  absl::StatusOr<Import> sample =
      ImportText(text, "kr_sample.yaml", {.seed = 1, .module_paths = ModulePaths});
  ASSERT_THAT(sample, IsOk());
  EXPECT_THAT(sample->unsupported, IsEmpty());
  EXPECT_THAT(sample->notes, Contains(HasSubstr("in_channel: taken as in_channels")));
  sample->config.mutable_run()->set_name(imported->config.run().name());
  ExpectSameConfig(sample->config, imported->config);
}

// A CIFAR-10 root in the binary version's layout: ten random training records (two a file) and
// eight test records.
std::string WriteCifar10(const std::string& name) {
  const std::string root = RunDir(name), dir = root + "/cifar-10-batches-bin";
  std::filesystem::create_directories(dir);
  std::mt19937 random(0);
  auto write = [&](const std::string& file, int64_t n) {
    std::string records;
    for (int64_t i = 0; i < n; ++i) {
      records += static_cast<char>(random() % 10);  // the label byte
      for (int p = 0; p < 3072; ++p) records += static_cast<char>(random() % 256);
    }
    ASSERT_THAT(WriteFileAtomically(dir + "/" + file, records), IsOk());
  };
  for (int f = 1; f <= 5; ++f) write(absl::StrCat("data_batch_", f, ".bin"), 2);
  write("test_batch.bin", 8);
  return root;
}

// torchdistill's CIFAR-10 form (torchvision's CIFAR10 with RandomCrop(32, 4),
// RandomHorizontalFlip, ToTensor, a per-channel Normalize): libkd's cifar10 dataset with those
// kwargs, trained on binary files written here.
TEST_F(BoxTest, Cifar10ImportsAsLibkdsDataset) {
  absl::StatusOr<Import> imported = ImportFile(TestData("cifar10_kd.yaml"), {.seed = 1});
  ASSERT_THAT(imported, IsOk());
  EXPECT_THAT(imported->unsupported, IsEmpty());
  DistillConfig config = imported->config;
  ASSERT_EQ(config.datasets_size(), 2);
  const DatasetConfig& train = config.datasets(0);
  EXPECT_EQ(train.key(), "cifar10");
  std::vector<std::string> kwargs;
  for (const Kwarg& k : train.kwargs()) kwargs.push_back(k.name());
  EXPECT_THAT(kwargs, ElementsAre("split", "root", "random_crop_padding", "horizontal_flip", "mean",
                                  "std"));
  EXPECT_EQ(train.kwargs(2).integer(), 4);
  EXPECT_THAT(train.kwargs(5).numbers().values(), ElementsAre(0.24703223, 0.24348513, 0.26158784));
  EXPECT_EQ(config.datasets(1).kwargs(0).str(), "test");
  const std::string root = WriteCifar10("cifar10_files");
  for (DatasetConfig& dataset : *config.mutable_datasets())
    dataset.mutable_kwargs(1)->set_str(root);
  RunIn(config, RunDir("cifar10"));
  // Training on part of a seeded random split (what torchdistill's hyperparameter-tuning
  // samples' random_split imports as), validating on the rest of it.
  RandomSplitConfig* split = config.mutable_datasets(0)->mutable_subset()->mutable_random_split();
  split->add_lengths(0.8);
  split->add_lengths(0.2);
  split->set_seed(42);
  DatasetConfig held_out = config.datasets(0);
  held_out.set_id("cifar10/val");
  held_out.mutable_subset()->mutable_random_split()->set_part(1);
  *config.add_datasets() = held_out;
  config.mutable_train()->mutable_val_data_loader()->set_dataset_id("cifar10/val");
  RunIn(config, RunDir("cifar10_split"));
}

// torchdistill 1.x's hyperparameter-tuning form: the training set carved by split_dataset
// (lengths [0.9, 0.1], generator_seed 42, a transform per sub-split), each part picked with
// !access_by_index_or_key: libkd's cifar10 with that sub-split's transform and part i of the
// seeded split by split_dataset's lengths rule (the indices: dataset_test); trains on the first
// part and validates on the second.
TEST_F(BoxTest, SplitDatasetPartsImportAsSeededSplits) {
  absl::StatusOr<Import> imported = ImportFile(TestData("cifar10_split_dataset.yaml"), {.seed = 1});
  ASSERT_THAT(imported, IsOk());
  EXPECT_THAT(imported->unsupported, IsEmpty());
  DistillConfig config = imported->config;
  ASSERT_EQ(config.datasets_size(), 3);
  auto kwarg_names = [](const DatasetConfig& d) {
    std::vector<std::string> names;
    for (const Kwarg& k : d.kwargs()) names.push_back(k.name());
    return names;
  };
  for (int part = 0; part < 2; ++part) {
    const DatasetConfig& d = config.datasets(part);
    EXPECT_EQ(d.id(), part == 0 ? "cifar10/train" : "cifar10/val");
    EXPECT_EQ(d.key(), "cifar10");
    EXPECT_EQ(d.kwargs(0).str(), "train");
    const RandomSplitConfig& split = d.subset().random_split();
    EXPECT_THAT(split.lengths(), ElementsAre(0.9, 0.1));
    EXPECT_EQ(split.seed(), 42);
    EXPECT_EQ(split.part(), part);
    EXPECT_EQ(split.lengths_rule(), RandomSplitConfig::SPLIT_DATASET);
  }
  EXPECT_THAT(kwarg_names(config.datasets(0)),
              ElementsAre("split", "root", "random_crop_padding", "horizontal_flip", "mean", "std"));
  EXPECT_THAT(kwarg_names(config.datasets(1)), ElementsAre("split", "root", "mean", "std"));
  EXPECT_EQ(config.datasets(2).kwargs(0).str(), "test");
  EXPECT_FALSE(config.datasets(2).has_subset());
  EXPECT_EQ(config.train().val_data_loader().dataset_id(), "cifar10/val");
  const std::string root = WriteCifar10("cifar10_split_files");
  for (DatasetConfig& dataset : *config.mutable_datasets()) dataset.mutable_kwargs(1)->set_str(root);
  RunIn(config, RunDir("cifar10_split_dataset"));
}

// torchdistill's ILSVRC 2012 form: torchvision's ImageFolder with RandomResizedCrop, flips,
// Resize and CenterCrop as libkd's image_folder; trained a step on a small class-folder tree
// (tests/testdata/image_folder: JPEG and PNG files of several sizes) and validated.
TEST_F(BoxTest, ImageFolderImportsAsLibkdsDataset) {
  absl::StatusOr<Import> imported = ImportFile(TestData("image_folder.yaml"), {.seed = 1});
  ASSERT_THAT(imported, IsOk());
  EXPECT_THAT(imported->unsupported, IsEmpty());
  DistillConfig config = imported->config;
  ASSERT_EQ(config.datasets_size(), 2);
  auto kwarg_names = [](const DatasetConfig& d) {
    std::vector<std::string> names;
    for (const Kwarg& k : d.kwargs()) names.push_back(k.name());
    return names;
  };
  EXPECT_EQ(config.datasets(0).key(), "image_folder");
  EXPECT_THAT(kwarg_names(config.datasets(0)),
              ElementsAre("root", "random_resized_crop", "horizontal_flip", "mean", "std"));
  EXPECT_EQ(config.datasets(0).kwargs(1).integer(), 16);
  EXPECT_THAT(kwarg_names(config.datasets(1)),
              ElementsAre("root", "resize", "center_crop", "mean", "std"));
  EXPECT_EQ(config.datasets(1).kwargs(1).integer(), 20);
  const std::string root = kd::test::FixturePath("image_folder");
  for (DatasetConfig& dataset : *config.mutable_datasets()) dataset.mutable_kwargs(0)->set_str(root);
  RunIn(config, RunDir("image_folder"));
}

// Every loss with an import rule, as torchdistill's configs write it (module paths in its
// kwargs, pair lists), imports whole and trains a stand-in pair (fashion_cnn, width 4, both) for
// an epoch on synthetic images.
TEST_F(BoxTest, EachMethodWithARuleImportsAndTrainsAStandInPair) {
  const std::string io = R"(
              student_module_path: '.'
              student_module_io: 'output'
              teacher_module_path: '.'
              teacher_module_io: 'output')";
  const std::vector<std::pair<std::string, std::string>> methods = {
      {"KDLoss", io + "\n              temperature: 4.0\n              alpha: 0.5"},
      {"LogitStdKDLoss", io + "\n              temperature: 2.0\n              alpha: 0.5"},
      {"PKTLoss", io},
      {"DISTLoss", io},
      {"SKDInstanceLoss", io},
      {"SKDDirectionLoss", io},
      {"AffinityLoss", R"(
              student_module_path: 'layer1'
              student_module_io: 'output'
              teacher_module_path: 'layer1'
              teacher_module_io: 'output')"},
      {"RKDLoss", R"(
              student_output_path: 'layer2'
              teacher_output_path: 'layer2'
              dist_factor: 1.0
              angle_factor: 2.0
              reduction: 'mean')"},
      {"SPKDLoss", R"(
              student_output_path: 'layer2'
              teacher_output_path: 'layer2'
              reduction: 'batchmean')"},
      {"CCKDLoss", R"(
              student_linear_path: 'head'
              teacher_linear_path: 'head'
              kernel_config: {type: 'gaussian', gamma: 0.4, max_p: 2}
              reduction: 'batchmean')"},
      {"ATLoss", R"(
              at_pairs:
                pair1: {student: {path: 'layer1', io: 'output'}, teacher: {path: 'layer1', io: 'output'}, weight: 1}
              mode: 'code')"},
      {"FSPLoss", R"(
              fsp_pairs:
                pair1:
                  student_first: {path: 'stem', io: 'output'}
                  student_second: {path: 'layer1', io: 'output'}
                  teacher_first: {path: 'stem', io: 'output'}
                  teacher_second: {path: 'layer1', io: 'output'}
                  weight: 1)"},
      {"ChSimLoss", R"(
              feature_pairs:
                pair1: {student: {path: 'layer2', io: 'output'}, teacher: {path: 'layer2', io: 'output'}, weight: 1})"},
      {"RegularizationLoss", R"(
              module_path: 'layer2'
              io_type: 'output'
              is_from_teacher: False
              p: 2)"},
  };
  std::string base = *ReadFile(TestData("at.yaml"));
  base.replace(base.find("width: 8"), 8, "width: 4");
  for (const char* hooks : {"      output: ['layer1', 'layer2']\n"}) {
    for (size_t at = base.find(hooks); at != std::string::npos; at = base.find(hooks, at + 1)) {
      base.replace(at, std::string(hooks).size(),
                   "      output: ['stem', 'layer1', 'layer2', 'head']\n");
    }
  }
  base = base.substr(0, base.find("        at_loss:"));  // the CE sub-term stays
  for (const auto& [loss, kwargs] : methods) {
    SCOPED_TRACE(loss);
    const std::string yaml =
        absl::StrCat(base, "        method:\n          criterion:\n", "            key: '", loss,
                     "'\n            kwargs:", kwargs, "\n          weight: 0.5\n");
    absl::StatusOr<Import> imported = ImportText(yaml, loss + ".yaml", {.seed = 1});
    ASSERT_THAT(imported, IsOk());
    EXPECT_THAT(imported->unsupported, IsEmpty());
    ASSERT_GE(imported->config.train().criterion().terms_size(), 2);
    EXPECT_EQ(imported->config.train().criterion().terms(1).key(), loss);
    RunIn(imported->config, RunDir(loss));
  }
}

}  // namespace
}  // namespace torchdistill
}  // namespace kd
