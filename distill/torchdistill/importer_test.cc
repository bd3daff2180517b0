// torchdistill YAML imported: the main job's three configs, written in torchdistill's YAML, give
// the libkd configs they were written from; what has no translation is reported at its line and
// column; rules match torchdistill's signatures; bad YAML is one error with line:column.
// Training the imported configs: importer_training_test.
#include "distill/torchdistill/importer.h"

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "distill/torchdistill/import_test_util.h"
#include "distill/losses/loss.h"
#include "distill/losses/torchdistill_rule.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace torchdistill {
namespace {

using test::ExpectSameConfig;
using test::Original;
using test::TestData;
using test::WithoutRoots;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;
using ::testing::UnorderedElementsAre;

TEST(ImporterTest, TheMainJobsConfigsComeBackFromTheirYaml) {
  setenv("HOME", "/home/user", 1);  // torchvision expands ~ in root
  for (const std::string name : {"teacher", "student", "student_kd"}) {
    SCOPED_TRACE(name);
    // libkd's teacher mode, as the main job's configs run their teachers.
    absl::StatusOr<Import> imported = ImportFile(
        TestData(name + ".yaml"), {.seed = 1, .teacher_mode = StageConfig::TEACHER_EVAL});
    ASSERT_THAT(imported, IsOk());
    EXPECT_THAT(imported->unsupported, IsEmpty());
    // download, pin_memory, DataParallel: left out with a note each, at their positions
    EXPECT_THAT(imported->notes, Contains(StartsWith(TestData(name + ".yaml") + ":14:")));
    ExpectSameConfig(WithoutRoots(imported->config), Original("fashion_mnist_" + name + ".pbtxt"));
    // torchvision's root, as libkd's fashion_mnist root
    EXPECT_EQ(imported->config.datasets(0).kwargs(1).str(),
              "/home/user/datasets/fashion_mnist/FashionMNIST/raw");
  }
}

// torchdistill's boxes never set the teacher's mode: an imported distillation runs the teacher
// as it was handed in (TEACHER_AS_IS), with a note; a training box has no teacher to leave.
TEST(ImporterTest, TheTeacherRunsAsTorchdistillLeavesIt) {
  absl::StatusOr<Import> imported = ImportFile(TestData("student_kd.yaml"), {.seed = 1});
  ASSERT_THAT(imported, IsOk());
  EXPECT_EQ(imported->config.train().teacher_mode(), StageConfig::TEACHER_AS_IS);
  EXPECT_THAT(imported->notes, Contains(HasSubstr("train: teacher_mode: TEACHER_AS_IS, as "
                                                  "torchdistill's boxes never set the teacher's "
                                                  "mode")));
  absl::StatusOr<Import> student = ImportFile(TestData("student.yaml"), {.seed = 1});
  ASSERT_THAT(student, IsOk());
  EXPECT_EQ(student->config.train().teacher_mode(), StageConfig::TEACHER_EVAL);
}

// torchdistill's requires_grad defaults to True for the teacher too: a teacher section without
// it trains in torchdistill (its parameters join the optimizer, its forward keeps gradients), so
// the import trains it, with a note; requires_grad: False freezes it, as libkd's default does.
TEST(ImporterTest, ATeacherWithoutRequiresGradTrainsAsInTorchdistill) {
  for (const bool given : {false, true}) {
    SCOPED_TRACE(given ? "requires_grad: False" : "no requires_grad");
    const std::string yaml = absl::StrCat(R"(models:
  teacher_model: {key: 'fashion_cnn'}
  student_model: {key: 'fashion_cnn'}
train:
  num_epochs: 1
  teacher:
    forward_proc: 'forward_batch_only'
)", given ? "    requires_grad: False\n" : "", R"(  student:
    requires_grad: True
)");
    absl::StatusOr<Import> imported = ImportText(yaml, "g.yaml", {.seed = 1});
    ASSERT_THAT(imported, IsOk());
    const StageModelConfig& teacher = imported->config.train().teacher();
    // libkd's default freezes the teacher: requires_grad is set only where it trains
    EXPECT_EQ(teacher.has_requires_grad() && teacher.requires_grad(), !given);
    EXPECT_FALSE(imported->config.train().student().has_requires_grad());  // libkd's default
    const auto note = Contains(HasSubstr(
        "g.yaml:7:5: train.teacher.requires_grad: not given: torchdistill trains the teacher "
        "then (its default is True)"));
    if (given) {
      EXPECT_THAT(imported->notes, Not(note));
    } else {
      EXPECT_THAT(imported->notes, note);
    }
  }
}

// A stage's process functions are registry keys, as torchdistill's get_*_proc_func reads them
// (they were reported as keys torchdistill does not read); a wrapper may be {key, kwargs}.
TEST(ImporterTest, StageProcessesAndTheWrappersMappingForm) {
  const std::string yaml = R"(models:
  teacher_model: {key: 'fashion_cnn'}
  student_model: {key: 'fashion_cnn'}
train:
  num_epochs: 1
  pre_epoch_process: 'default_pre_epoch_process_with_teacher'
  post_forward_process: 'my_own_post_forward'
  student:
    wrapper: {key: 'DistributedDataParallel', kwargs: {device_ids: [0], broadcast_buffers: False}}
)";
  absl::StatusOr<Import> imported = ImportText(yaml, "p.yaml", {.seed = 1});
  ASSERT_THAT(imported, IsOk());
  EXPECT_EQ(imported->config.train().pre_epoch_proc().key(),
            "default_pre_epoch_process_with_teacher");
  EXPECT_EQ(imported->config.train().student().wrapper(),
            StageModelConfig::DISTRIBUTED_DATA_PARALLEL);
  EXPECT_THAT(imported->unsupported,
              UnorderedElementsAre(HasSubstr("p.yaml:7:25: train.post_forward_process my_own_post_forward "
                                    "is not supported: libkd has no process function of that "
                                    "key: register one in C++"),
                                   HasSubstr("p.yaml:9:92: train.student.wrapper.kwargs."
                                             "broadcast_buffers is not supported: libkd's "
                                             "DistributedDataParallel (c10d's Reducer) takes no "
                                             "wrapper kwargs")));
  EXPECT_THAT(imported->notes, Contains(HasSubstr("train.student.wrapper.kwargs.device_ids: left "
                                                  "out")));
}

// What has no translation: each reported at its position, the rest translated.
TEST(ImporterTest, WhatHasNoTranslationIsReportedWhereItIs) {
  constexpr char kYaml[] = R"(datasets:
  voc/train: !import_call
    key: 'torchvision.datasets.VOCDetection'
    init:
      kwargs:
        root: '/data/train'
models:
  teacher_model:
    key: 'vit_b_16'
    kwargs:
      num_classes: 1000
  student_model:
    key: 'fashion_cnn'
    kwargs:
      width: 4
      depth: 3
train:
  num_epochs: 2
  clip_grad: 5
  criterion:
    key: 'WeightedSumLoss'
    kwargs:
      sub_terms:
        crd:
          criterion:
            key: 'NoSuchLoss'
            kwargs:
          weight: 1.0
        kd:
          criterion:
            key: 'KDLoss'
            kwargs:
              student_module_path: '.'
              student_module_io: 'output'
              teacher_module_path: '.'
              teacher_module_io: 'output'
              temperature: 4.0
              alpha: 0.5
              tau: 2.0
)";
  absl::StatusOr<Import> imported = ImportText(kYaml, "c.yaml");
  ASSERT_THAT(imported, IsOk());
  EXPECT_THAT(
      imported->unsupported,
      ElementsAre(
          AllOf(StartsWith("c.yaml:3:10: datasets.voc/train torchvision.datasets.VOCDetection "
                           "is not supported: register a libkd dataset"),
                HasSubstr("DatasetRegistry")),
          AllOf(StartsWith("c.yaml:9:10: models.teacher_model vit_b_16 is not supported: not a "
                           "libkd model: export the Python teacher"),
                HasSubstr("tools/export_teacher.py --model=torchvision:vit_b_16")),
          StartsWith("c.yaml:16:14: models.student_model.kwargs.depth is not supported: libkd's "
                     "model \"fashion_cnn\" takes "),
          AllOf(StartsWith("c.yaml:26:18: train.criterion.kwargs.sub_terms.crd.criterion "
                           "NoSuchLoss is not supported: libkd has no such loss"),
                HasSubstr("registered")),
          StartsWith("c.yaml:39:20: train.criterion.kwargs.sub_terms.kd.criterion.kwargs.tau is "
                     "not supported: libkd's loss \"KDLoss\" takes "),
          "c.yaml:19:14: train.clip_grad is not supported: torchdistill does not read it there "
          "either, or libkd has no such setting (docs/torchdistill_import.md lists what maps)"));
  // The translated rest: the KD term and its wiring.
  ASSERT_EQ(imported->config.train().criterion().terms_size(), 1);
  EXPECT_EQ(imported->config.train().criterion().terms(0).key(), "KDLoss");
  EXPECT_EQ(imported->config.train().criterion().terms(0).inputs_size(), 3);
  EXPECT_EQ(imported->config.teacher().native().key(), "vit_b_16");
}

// Each loss's import rule against the peer's own code: the kwargs it wires are parameters of
// torchdistill's class (testdata/torchdistill_loss_signatures.txt, read from the installed
// torchdistill by make_loss_signatures.py), and the libkd loss it makes exists.
TEST(ImporterTest, EveryLossRuleMatchesTorchdistillsSignature) {
  std::ifstream in(TestData("torchdistill_loss_signatures.txt"));
  ASSERT_TRUE(in.good());
  std::map<std::string, std::set<std::string>> signatures;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string name, param;
    words >> name;
    while (words >> param) signatures[name].insert(param);
  }
  ASSERT_GT(signatures.size(), 20u);
  const std::vector<std::string> keys = TorchdistillLossRules().Keys();
  EXPECT_EQ(keys.size(), 25u);  // docs/torchdistill_import.md lists them
  for (const std::string& key : keys) {
    SCOPED_TRACE(key);
    ASSERT_TRUE(signatures.contains(key)) << "no torchdistill loss of that name";
    const std::set<std::string>& params = signatures[key];
    const TorchdistillLossRule& rule = **TorchdistillLossRules().Get(key);
    EXPECT_TRUE(LossRegistry().Contains(rule.libkd_key.empty() ? key : rule.libkd_key));
    for (const auto& value : rule.values) {
      EXPECT_TRUE(params.contains(value.path_kwarg)) << value.path_kwarg;
      if (!value.io_kwarg.empty()) {
        EXPECT_TRUE(params.contains(value.io_kwarg)) << value.io_kwarg;
      }
    }
    if (!rule.pairs_kwarg.empty()) {
      EXPECT_TRUE(params.contains(rule.pairs_kwarg));
    }
    for (const auto& [dict, _] : rule.flattened) EXPECT_TRUE(params.contains(dict)) << dict;
  }
}

// CCKD's kernel as torchdistill's sample writes it (kernel_params {key}) becomes flat kwargs; a
// loader's dataset_wrapper wraps its dataset; a TrainingBox's `model` section is the student's.
TEST(ImporterTest, NestedKwargsFlattenAndLoaderWrappersMoveToTheDataset) {
  constexpr char kYaml[] = R"(datasets:
  train: !import_call
    key: 'torchvision.datasets.FakeData'
    init:
      kwargs: {size: 8, image_size: [1, 28, 28], num_classes: 4}
train:
  num_epochs: 1
  train_data_loader:
    dataset_id: 'train'
    kwargs: {batch_size: 4}
    dataset_wrapper:
      key: 'CRDDatasetWrapper'
      kwargs: {num_negative_samples: 16}
  model:
    frozen_modules: ['stem']
  criterion:
    key: 'WeightedSumLoss'
    kwargs:
      sub_terms:
        cckd:
          criterion:
            key: 'CCKDLoss'
            kwargs:
              student_linear_path: 'fc'
              teacher_linear_path: 'fc'
              kernel_params: {key: 'gaussian', gamma: 0.4, max_p: 2}
              reduction: 'batchmean'
)";
  absl::StatusOr<Import> imported = ImportText(kYaml, "w.yaml");
  ASSERT_THAT(imported, IsOk());
  EXPECT_THAT(imported->unsupported, IsEmpty());
  const LossTermConfig& term = imported->config.train().criterion().terms(0);
  std::vector<std::string> kwargs;
  for (const Kwarg& k : term.kwargs()) kwargs.push_back(k.name());
  EXPECT_THAT(kwargs, ElementsAre("kernel", "gamma", "max_p", "reduction"));
  EXPECT_EQ(term.kwargs(0).str(), "gaussian");
  EXPECT_EQ(term.inputs(0).path(), "fc");
  EXPECT_EQ(term.inputs(1).source(), IoRef::TEACHER);
  const DatasetConfig& dataset = imported->config.datasets(0);
  EXPECT_EQ(dataset.wrapper().key(), "CRDDatasetWrapper");
  EXPECT_EQ(dataset.wrapper().kwargs(0).integer(), 16);
  EXPECT_THAT(imported->notes, Contains(HasSubstr("every loader of \"train\" sees it wrapped")));
  EXPECT_THAT(imported->config.train().student().frozen_modules(), ElementsAre("stem"));
}

// torchdistill's model names through the rules their libkd models declare; download switches.
// torchdistill's adaptations ("+name" in a sequential): after the model's last module they are
// auxiliary modules (FitNet: importer_training_test); between two of its modules (HND's
// teacher), of a key libkd has no module for, or without their entry they cannot be.
TEST(ImporterTest, AdaptationsThatCannotBeAuxiliaryModulesAreReported) {
  constexpr char kHead[] = R"(train:
  num_epochs: 1
  student:
    adaptations:
      pool: {key: 'MaxPool2d', kwargs: {kernel_size: 3, stride: 2}}
      reg: {key: 'ConvReg', kwargs: {num_input_channels: 4, num_output_channels: 8,
                                     kernel_size: 1, stride: 1, padding: 0}}
)";
  struct Case {
    const char* sequential;
    const char* report;
  };
  for (const Case& c : std::vector<Case>{
           {"['stem', '+reg', 'layer1']",
            "a.yaml:8:17: train.student.sequential \"+reg\" before \"layer1\" is not supported: "
            "libkd's trimmed model runs the model's own modules in order and auxiliary modules "
            "after them"},
           {"['stem', '+pool']",
            "a.yaml:5:19: train.student.adaptations.pool MaxPool2d is not supported: libkd builds "
            "adaptations as auxiliary modules: no auxiliary_module \"MaxPool2d\" is registered"},
           {"['+reg', 'stem']", "train.student.sequential \"+reg\" before \"stem\""},
           {"['+reg']",
            "a.yaml:8:17: train.student.sequential \"+reg\" is not supported: an adaptation first "
            "in the sequential runs on the model's input"}}) {
    SCOPED_TRACE(c.sequential);
    absl::StatusOr<Import> imported =
        ImportText(absl::StrCat(kHead, "    sequential: ", c.sequential, "\n"), "a.yaml");
    ASSERT_THAT(imported, IsOk());
    EXPECT_THAT(imported->unsupported, Contains(HasSubstr(c.report)));
    EXPECT_EQ(imported->config.train().student().auxiliary_modules_size(), 0);
  }
  EXPECT_THAT(ImportText(absl::StrCat(kHead, "    sequential: ['stem', '+convreg']\n"), "a.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a.yaml:8:17: train.student.sequential \"+convreg\" needs "
                                 "train.student.adaptations.convreg")));
}

// Rules whose paths default to torchdistill's module names (KTALoss: the student's
// feature_adapter, the teacher's paraphraser) or whose source a kwarg picks
// (RegularizationLoss's is_from_teacher).
TEST(ImporterTest, DefaultPathsAndTheSourceKwargWireTheTerm) {
  constexpr char kYaml[] = R"(train:
  num_epochs: 1
  criterion:
    key: 'WeightedSumLoss'
    kwargs:
      sub_terms:
        kta: {criterion: {key: 'KTALoss', kwargs: {p: 1, q: 2}}, weight: 1}
        reg:
          criterion:
            key: 'RegularizationLoss'
            kwargs: {module_path: 'layer2', io_type: 'input', is_from_teacher: True, p: 1}
          weight: 1
)";
  absl::StatusOr<Import> imported = ImportText(kYaml, "d.yaml");
  ASSERT_THAT(imported, IsOk());
  EXPECT_THAT(imported->unsupported, IsEmpty());
  std::vector<std::string> inputs;
  for (const LossTermConfig& term : imported->config.train().criterion().terms()) {
    for (const IoRef& in : term.inputs()) {
      inputs.push_back(absl::StrCat(term.name(), ".", in.arg(), "=",
                                    IoRef::Source_Name(in.source()), ":", in.path(), ":",
                                    IoRef::Io_Name(in.io())));
    }
  }
  EXPECT_THAT(inputs, ElementsAre("kta.student=STUDENT:feature_adapter:OUTPUT",
                                  "kta.teacher=TEACHER:paraphraser:OUTPUT",
                                  "reg.input=TEACHER:layer2:INPUT"));
}

// torchdistill's negative indices in module paths ("layer1.-1": layer1's last child, as its
// get_module takes them) become the child's name where the model's module paths are known
// (ImportOptions.module_paths: the tool builds the model); else they stay as written.
TEST(ImporterTest, NegativeIndicesNameTheChildFromTheEnd) {
  constexpr char kYaml[] = R"(models:
  student_model: {key: 'fashion_cnn', kwargs: {width: 4}}
train:
  num_epochs: 1
  student:
    forward_hook:
      output: ['stem.-1', 'stem.-3', 'stem.-4', 'layer2.-2.x', '-1', 'head.-1', 'stem.1']
)";
  const std::vector<std::string> paths = {"",       "stem",     "stem.0",   "stem.1",     "stem.2",
                                          "layer2", "layer2.0", "layer2.1", "layer2.1.x", "head"};
  int calls = 0;
  absl::StatusOr<Import> imported =
      ImportText(kYaml, "n.yaml", {.module_paths = [&](const ModelConfig& model) {
                   ++calls;
                   EXPECT_EQ(model.native().key(), "fashion_cnn");
                   return paths;
                 }});
  ASSERT_THAT(imported, IsOk());
  EXPECT_EQ(calls, 1);  // the student's; no teacher
  std::vector<std::string> hooked;
  for (const ForwardHookConfig& h : imported->config.train().student().forward_hooks()) {
    hooked.push_back(h.module_path());
  }
  // stem's children 0-2; stem.-4 has none; layer2's last but one is 0; the last top-level
  // module is head, which has no children
  EXPECT_THAT(hooked, ElementsAre("stem.2", "stem.0", "stem.-4", "layer2.0.x", "head", "head.-1",
                                  "stem.1"));
  // without the model's paths: as written
  absl::StatusOr<Import> unresolved = ImportText(kYaml, "n.yaml");
  ASSERT_THAT(unresolved, IsOk());
  EXPECT_EQ(unresolved->config.train().student().forward_hooks(0).module_path(), "stem.-1");
}

// torchdistill 0.x's (and early 1.x's) datasets with splits, as its stored CIFAR samples have
// them: each split as 1.x's !import_call would give it; a random_split a dataset per sub-split,
// part i of the seeded split; 0.x's type/params/transform_params spelling as key/kwargs.
TEST(ImporterTest, SplitDatasetsBecomeADatasetEach) {
  constexpr char kYaml[] = R"(datasets:
  cifar10:
    name: &name 'cifar10'
    key: 'CIFAR10'
    root: &root '/data/cifar10'
    splits:
      dummy:
        dataset_id: 'dummy'
        kwargs: {root: *root, train: True, download: True}
        random_split:
          lengths: [0.9, 0.1]
          generator_seed: 42
          sub_splits:
            - dataset_id: 'cifar10/train'
              transform_configs:
                - {key: 'RandomCrop', kwargs: {size: 32, padding: 4}}
                - {key: 'ToTensor', kwargs: }
            - dataset_id: 'cifar10/val'
              transform_configs:
                - {key: 'ToTensor', kwargs: }
      test:
        dataset_id: 'cifar10/test'
        params:
          root: *root
          train: False
          transform_params:
            - {type: 'ToTensor', params: }
            - {type: 'Normalize', params: {mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25]}}
)";
  absl::StatusOr<Import> imported = ImportText(kYaml, "s.yaml");
  ASSERT_THAT(imported, IsOk());
  EXPECT_THAT(imported->unsupported, IsEmpty());
  std::string datasets;
  for (const DatasetConfig& d : imported->config.datasets()) {
    std::string kwargs;
    for (const Kwarg& k : d.kwargs()) absl::StrAppend(&kwargs, " ", k.name());
    const RandomSplitConfig& split = d.subset().random_split();
    absl::StrAppend(&datasets, d.id(), " ", d.key(), ":", kwargs,
                    d.subset().has_random_split()
                        ? absl::StrCat(" part ", split.part(), " of ", split.lengths_size(),
                                       " seed ", split.seed())
                        : "");
    datasets += "\n";
  }
  EXPECT_EQ(datasets,
            "cifar10/train cifar10: split root random_crop_padding part 0 of 2 seed 42\n"
            "cifar10/val cifar10: split root part 1 of 2 seed 42\n"
            "cifar10/test cifar10: split root mean std\n");
  EXPECT_EQ(imported->config.datasets(0).kwargs(1).str(), "/data/cifar10");
  EXPECT_EQ(imported->config.datasets(2).kwargs(0).str(), "test");
}

// torchdistill 0.x's forms (a model's name and params, an optimizer's and a scheduler's type
// and params, a criterion's org_term and sub_terms with params and factor) import as the same
// config written in 1.x's form: 0.x's org term, KDLoss here, read the models' outputs and the
// labels.
TEST(ImporterTest, ZeroXFormsImportAsTheirOneXForms) {
  constexpr char kZeroX[] = R"(models:
  student_model: {name: 'resnet20', params: {num_classes: 10}}
train:
  num_epochs: 1
  optimizer: {type: 'SGD', params: {lr: 0.1, momentum: 0.9}}
  scheduler: {type: 'MultiStepLR', params: {milestones: [5], gamma: 0.1}}
  criterion:
    type: 'GeneralizedCustomLoss'
    org_term:
      criterion: {type: 'KDLoss', params: {temperature: 4.0, alpha: 0.5}}
      factor: 1.0
    sub_terms:
      hint:
        criterion: {type: 'MSELoss', params: {reduction: 'sum'}}
        params:
          input: {is_from_teacher: False, module_path: 'layer1', io: 'output'}
          target: {is_from_teacher: True, module_path: 'layer1', io: 'output'}
        factor: 0.5
)";
  constexpr char kOneX[] = R"(models:
  student_model: {key: 'resnet20', kwargs: {num_classes: 10}}
train:
  num_epochs: 1
  optimizer: {key: 'SGD', kwargs: {lr: 0.1, momentum: 0.9}}
  scheduler: {key: 'MultiStepLR', kwargs: {milestones: [5], gamma: 0.1}}
  criterion:
    key: 'WeightedSumLoss'
    kwargs:
      sub_terms:
        hint:
          criterion: {key: 'MSELoss', kwargs: {reduction: 'sum'}}
          criterion_wrapper:
            key: 'SimpleLossWrapper'
            kwargs:
              input: {is_from_teacher: False, module_path: 'layer1', io: 'output'}
              target: {is_from_teacher: True, module_path: 'layer1', io: 'output'}
          weight: 0.5
        org_term:
          criterion:
            key: 'KDLoss'
            kwargs:
              student_module_path: '.'
              teacher_module_path: '.'
              temperature: 4.0
              alpha: 0.5
          weight: 1.0
)";
  absl::StatusOr<Import> zero_x = ImportText(kZeroX, "c.yaml");
  absl::StatusOr<Import> one_x = ImportText(kOneX, "c.yaml");
  ASSERT_THAT(zero_x, IsOk());
  ASSERT_THAT(one_x, IsOk());
  EXPECT_THAT(zero_x->unsupported, IsEmpty());
  EXPECT_THAT(one_x->unsupported, IsEmpty());
  ExpectSameConfig(zero_x->config, one_x->config);
  EXPECT_THAT(zero_x->notes, Contains(HasSubstr("torchdistill 0.x's form (type, org_term, "
                                                "sub_terms), taken as 1.x's")));
  // The org term of another loss: the student's output and the labels.
  std::string ce = kZeroX;
  ce.replace(ce.find("{type: 'KDLoss', params: {temperature: 4.0, alpha: 0.5}}"),
             std::string("{type: 'KDLoss', params: {temperature: 4.0, alpha: 0.5}}").size(),
             "{type: 'CrossEntropyLoss', params: {reduction: 'mean'}}");
  absl::StatusOr<Import> with_ce = ImportText(ce, "c.yaml");
  ASSERT_THAT(with_ce, IsOk());
  const LossTermConfig& org = with_ce->config.train().criterion().terms(1);
  EXPECT_EQ(org.name(), "org_term");
  EXPECT_EQ(org.key(), "CrossEntropyLoss");
  ASSERT_EQ(org.inputs_size(), 2);
  EXPECT_EQ(org.inputs(0).source(), IoRef::STUDENT);
  EXPECT_EQ(org.inputs(0).path(), "");
  EXPECT_EQ(org.inputs(1).source(), IoRef::TARGETS);
}

TEST(ImporterTest, TorchdistillModelNamesBecomeLibkdModels) {
  constexpr char kYaml[] = R"(models:
  teacher_model:
    key: 'wide_resnet40_4'
    kwargs: {dropout_p: 0.0, num_classes: 100, pretrained: False, progress: True}
  student_model:
    key: 'resnet20'
    kwargs: {num_classes: 100, pretrained: True}
)";
  absl::StatusOr<Import> imported = ImportText(kYaml, "m.yaml");
  ASSERT_THAT(imported, IsOk());
  const PluginConfig& teacher = imported->config.teacher().native();
  EXPECT_EQ(teacher.key(), "wrn");
  std::vector<std::string> kwargs;
  for (const Kwarg& k : teacher.kwargs()) kwargs.push_back(k.name());
  EXPECT_THAT(kwargs, ElementsAre("depth", "widen_factor", "dropout", "num_classes"));
  EXPECT_EQ(teacher.kwargs(0).integer(), 40);
  EXPECT_EQ(teacher.kwargs(1).integer(), 4);
  EXPECT_EQ(imported->config.student().native().key(), "resnet20");
  EXPECT_THAT(imported->unsupported,
              ElementsAre(StartsWith("m.yaml:7:44: models.student_model.kwargs.pretrained is not "
                                     "supported: libkd knows no pretrained weights of "
                                     "\"resnet20\"")));
}

// torchvision's *_Weights (an !import_get of a member, its name, DEFAULT, legacy pretrained:
// True) and torchdistill's CIFAR checkpoints name the file torch.hub downloads as src_ckpt; an
// explicit src_ckpt replaces it; a name the model has not is reported with those it has.
TEST(ImporterTest, PretrainedWeightsNameTheirFiles) {
  struct Case {
    std::string model;
    std::string kwargs;
    std::string file;  // "" : reported
  };
  for (const Case& c : std::vector<Case>{
           {"resnet34", "weights: !import_get {key: 'torchvision.models.ResNet34_Weights.IMAGENET1K_V1'}",
            "resnet34-b627a593.pth"},
           {"resnet50", "weights: 'DEFAULT'", "resnet50-11ad3fa6.pth"},
           {"resnet50", "pretrained: True", "resnet50-0676ba61.pth"},
           {"wide_resnet50_2", "weights: 'Wide_ResNet50_2_Weights.IMAGENET1K_V1'",
            "wide_resnet50_2-95faca4d.pth"},
           {"densenet_bc_k12_depth100", "num_classes: 100, pretrained: True",
            "cifar100-densenet_bc_k12_depth100.pt"},
           {"densenet169",
            "weights: !getattr [!import_get {key: 'torchvision.models.densenet.DenseNet169_Weights'"
            "}, 'IMAGENET1K_V1']",
            "densenet169-b2777c0a.pth"},
           {"mobilenet_v3_large", "weights: DEFAULT", "mobilenet_v3_large-5c1a4163.pth"},
           {"efficientnet_b0", "weights: 'EfficientNet_B0_Weights.IMAGENET1K_V1'",
            "efficientnet_b0_rwightman-7f5810bc.pth"},
           {"resnet50", "weights: 'IMAGENET1K_V9'", ""}}) {
    SCOPED_TRACE(c.model + " " + c.kwargs);
    const std::string yaml = absl::StrCat("models:\n  teacher_model:\n    key: '", c.model,
                                          "'\n    kwargs: {", c.kwargs, "}\n");
    absl::StatusOr<Import> imported = ImportText(yaml, "w.yaml");
    ASSERT_THAT(imported, IsOk());
    if (c.file.empty()) {
      EXPECT_THAT(imported->unsupported,
                  ElementsAre(HasSubstr("torchvision's resnet50 has the weights IMAGENET1K_V1, "
                                        "IMAGENET1K_V2 and DEFAULT, not IMAGENET1K_V9")));
      continue;
    }
    EXPECT_THAT(imported->unsupported, IsEmpty());
    EXPECT_TRUE(absl::EndsWith(imported->config.teacher().src_ckpt(),
                               "/.cache/torch/hub/checkpoints/" + c.file))
        << imported->config.teacher().src_ckpt();
    EXPECT_THAT(imported->notes, Contains(HasSubstr("the pinned venv makes it")));
  }
  absl::StatusOr<Import> explicit_ckpt = ImportText(
      "models:\n  teacher_model:\n    key: 'resnet18'\n    kwargs: {pretrained: True}\n"
      "    src_ckpt: 'mine.pt'\n",
      "w.yaml");
  ASSERT_THAT(explicit_ckpt, IsOk());
  EXPECT_EQ(explicit_ckpt->config.teacher().src_ckpt(), "mine.pt");
}

// torchvision's inception_v3(weights=...) turns transform_input on unless given, and drops the
// file's AuxLogits when aux_logits is false; HND/GHND's custom_* students start from their
// original's file (ignore_mismatched_sizes: the bottleneck at random, the rest left out), and
// repo_or_dir sc2-benchmark names their modules as sc2-benchmark does.
TEST(ImporterTest, TorchvisionBuildersWithWeightsAndCustomStudents) {
  absl::StatusOr<Import> inception = ImportText(
      "models:\n  teacher_model:\n    key: 'inception_v3'\n"
      "    kwargs: {weights: IMAGENET1K_V1, aux_logits: False}\n",
      "w.yaml");
  ASSERT_THAT(inception, IsOk());
  EXPECT_THAT(inception->unsupported, IsEmpty());
  const ModelConfig& teacher = inception->config.teacher();
  EXPECT_TRUE(absl::EndsWith(teacher.src_ckpt(), "inception_v3_google-0cc3c7bd.pth"));
  EXPECT_TRUE(teacher.ignore_mismatched_sizes());
  std::map<std::string, bool> kwargs;
  for (const Kwarg& k : teacher.native().kwargs()) kwargs[k.name()] = k.boolean();
  EXPECT_EQ(kwargs,
            (std::map<std::string, bool>{{"aux_logits", false}, {"transform_input", true}}));

  for (const bool sc2bench : {false, true}) {
    SCOPED_TRACE(sc2bench);
    absl::StatusOr<Import> custom = ImportText(
        absl::StrCat("models:\n  student_model:\n",
                     sc2bench ? "    repo_or_dir: 'yoshitomo-matsubara/sc2-benchmark'\n" : "",
                     "    key: 'custom_densenet169'\n    kwargs: {bottleneck_channel: 12, "
                     "bottleneck_idx: 7, compressor: , decompressor: , num_classes: 1000, "
                     "weights: !getattr [!import_get {key: "
                     "'torchvision.models.densenet.DenseNet169_Weights'}, 'IMAGENET1K_V1']}\n"),
        "w.yaml");
    ASSERT_THAT(custom, IsOk());
    EXPECT_THAT(custom->unsupported, IsEmpty());
    const ModelConfig& student = custom->config.student();
    EXPECT_TRUE(absl::EndsWith(student.src_ckpt(), "densenet169-b2777c0a.pth"));
    EXPECT_TRUE(student.ignore_mismatched_sizes());
    const Kwarg& last = student.native().kwargs(student.native().kwargs_size() - 1);
    EXPECT_EQ(sc2bench, last.name() == "naming" && last.str() == "sc2bench");
  }
  absl::StatusOr<Import> hub = ImportText(
      "models:\n  student_model:\n    repo_or_dir: 'pytorch/vision'\n    key: 'resnet18'\n"
      "    kwargs: {num_classes: 10}\n",
      "w.yaml");
  ASSERT_THAT(hub, IsOk());
  EXPECT_THAT(hub->unsupported,
              ElementsAre(HasSubstr("w.yaml:3:18: models.student_model.repo_or_dir is not "
                                    "supported: a torch.hub repository (pytorch/vision)")));
}

TEST(ImporterTest, BadYamlIsOneErrorWithLineAndColumn) {
  struct Case {
    const char* yaml;
    const char* error;
  };
  const std::vector<Case> cases = {
      {"train:\n  num_epochs: [1, 2\n", "bad.yaml:3:1: "},
      {"train:\n  num_epochs: !repeat 3\n",
       "bad.yaml:2:15: unknown tag !repeat; torchdistill's tags are !join"},
      {"a: &x\n  b: *x\n", "bad.yaml:1:4: cyclic alias: the value anchored here contains an alias"},
      {"train:\n  num_epochs: 'ten'\n",
       "bad.yaml:2:15: train.num_epochs must be an integer, not a string 'ten'"},
      {"train:\n  optimizer:\n    key: SGD\n    max_grad_norm: 1e-5\n",
       "bad.yaml:4:20: train.optimizer.max_grad_norm must be a number (YAML 1.1, as PyYAML reads "
       "it, takes 1e-5 for a string: write 1.0e-5)"},
      {"datasets:\n  d: !join {a: 1}\n", "bad.yaml:2:6: !join takes a sequence, not a mapping"},
      {"- 1\n- 2\n", "bad.yaml:1:1: a torchdistill config is a mapping"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ImportText(c.yaml, "bad.yaml"),
                StatusIs(absl::StatusCode::kInvalidArgument, StartsWith(c.error)))
        << c.yaml;
  }
}

// Tags, anchors, merge keys and PyYAML's scalar types, as torchdistill reads them.
TEST(ImporterTest, TagsAnchorsAndScalarsResolveAsTorchdistillResolvesThem) {
  constexpr char kYaml[] = R"(models:
  student_model: &student
    key: !join ['fashion', '_', 'cnn']
    kwargs: &kwargs
      width: 0x4
train:
  log_freq: 1_000
  num_epochs: 3
  optimizer:
    <<: {key: 'SGD'}
    kwargs:
      lr: .5
      nesterov: yes
      momentum: 9.0e-1
)";
  absl::StatusOr<Import> imported = ImportText(kYaml, "t.yaml");
  ASSERT_THAT(imported, IsOk());
  EXPECT_THAT(imported->unsupported, IsEmpty());
  const DistillConfig& config = imported->config;
  EXPECT_EQ(config.student().native().key(), "fashion_cnn");
  EXPECT_EQ(config.student().native().kwargs(0).integer(), 4);
  EXPECT_EQ(config.run().log_every_n_steps(), 1000);
  EXPECT_EQ(config.run().name(), "t");
  const OptimizerConfig& optimizer = config.train().optimizer();
  EXPECT_EQ(optimizer.key(), "SGD");
  EXPECT_EQ(optimizer.kwargs(0).number(), 0.5);
  EXPECT_TRUE(optimizer.kwargs(1).boolean());
  EXPECT_EQ(optimizer.kwargs(2).number(), 0.9);
}

}  // namespace
}  // namespace torchdistill
}  // namespace kd
