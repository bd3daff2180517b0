// Boxes on the synthetic dataset (distill/data) with native models (distill/models): each box
// kind trains; stages advance with stage checkpoints; parameter groups, mixed precision, the
// test set, auxiliary modules, leak detection and the profiler. What survives a stop (resume,
// a killed checkpoint write, a NaN loss, missing files): box_recovery_test.cc.
#include "distill/boxes/box.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/module.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/torch_file.h"
#include "distill/boxes/testing/box_test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using test::BoxTest;
using test::ExpectSameStudent;
using test::kCe;
using test::kData;
using test::kKd;
using test::kStudent;
using test::kTeacher;
using test::Parse;
using test::RunDir;
using test::Stage;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST_F(BoxTest, TrainingBoxLearns) {
  const DistillConfig config =
      Parse(absl::StrCat(kData, kStudent, "train {", Stage("s", 3, kCe), "}"));
  auto box = MakeBox(config, {.run_dir = RunDir("training")});
  ASSERT_THAT(box, IsOk());
  EXPECT_EQ((*box)->kind(), "TrainingBox");
  auto result = (*box)->Run();
  ASSERT_THAT(result, IsOk());
  ASSERT_EQ(result->epochs.size(), 3u);
  EXPECT_LT(result->epochs.back().train_loss, result->epochs.front().train_loss);
  EXPECT_GT(result->final_metrics.at("accuracy"), 0.9);  // chance: 0.25
}

TEST_F(BoxTest, DistillationBoxRunsTheTeacherAndTheCriterion) {
  const DistillConfig config =
      Parse(absl::StrCat(kData, kTeacher, kStudent, "train {", Stage("kd", 2, kKd), "}"));
  int steps = 0;
  auto box =
      MakeBox(config, {.run_dir = RunDir("distillation"), .on_step = [&](const StepReport& r) {
                         ++steps;
                         EXPECT_EQ(r.terms.count("KDLoss"), 1u);
                       }});
  ASSERT_THAT(box, IsOk());
  EXPECT_EQ((*box)->kind(), "DistillationBox");
  auto result = (*box)->Run();
  ASSERT_THAT(result, IsOk());
  EXPECT_EQ(steps, 4);  // 8 batches an epoch, logged every 4, 2 epochs
  EXPECT_GT(result->final_metrics.at("accuracy"), 0.5);
}

// A TorchScript teacher optimized for inference (frozen, no parameters) teaches as the module
// itself does, up to rounding; its run checkpoints and resumes like any other.
TEST_F(BoxTest, ATeacherOptimizedForInferenceTeachesAsItself) {
  const std::string file = test::TempPath("teacher.pt");
  {
    at::manual_seed(5);
    torch::jit::Module teacher("Teacher");
    teacher.register_parameter("w", at::randn({4, 36}), /*is_buffer=*/false);
    teacher.register_parameter("b", at::randn({4}), /*is_buffer=*/false);
    teacher.define("def forward(self, x):\n  return torch.flatten(x, 1) @ self.w.t() + self.b\n");
    teacher.save(file);
  }
  const std::string stage = absl::StrCat("train {", Stage("kd", 2, kKd), "}");
  auto run = [&](const std::string& dir, bool optimized, int epochs, bool resume) {
    DistillConfig config = Parse(absl::StrCat(kData, kStudent, stage));
    config.mutable_teacher()->set_torchscript(file);
    config.mutable_teacher()->set_optimize_for_inference(optimized);
    config.mutable_train()->set_num_epochs(epochs);
    ForwardHookConfig* output = config.mutable_train()->mutable_teacher()->add_forward_hooks();
    output->set_requires_output(true);  // its output (module_path ""): what can be hooked
    auto box = MakeBox(config, {.run_dir = dir, .resume = resume});
    ASSERT_THAT(box, IsOk());
    EXPECT_EQ((*box)->kind(), "DistillationBox");
    EXPECT_THAT((*box)->Run(), IsOk());
  };
  const std::string as_is = RunDir("as_is"), optimized = RunDir("optimized"),
                    parts = RunDir("parts");
  run(as_is, false, 2, false);
  run(optimized, true, 2, false);
  const auto student = [](const std::string& dir) {
    return ReadTorchFile(dir + "/ckpt/last.pt")->toGenericDict().at("student").toGenericDict();
  };
  const c10::impl::GenericDict a = student(as_is), b = student(optimized);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& entry : a) {
    EXPECT_TRUE(at::allclose(entry.value().toTensor(), b.at(entry.key()).toTensor(), 0, 1e-5))
        << entry.key().toStringRef();
  }
  // The optimized teacher has no parameters: its checkpoint holds none.
  const auto teacher_tensors = [](const std::string& dir) {
    return ReadTorchFile(dir + "/ckpt/last.pt")
        ->toGenericDict()
        .at("teacher")
        .toGenericDict()
        .size();
  };
  EXPECT_EQ(teacher_tensors(as_is), 2u);
  EXPECT_EQ(teacher_tensors(optimized), 0u);
  run(parts, true, 1, false);  // stopped after its first epoch
  run(parts, true, 2, true);
  ExpectSameStudent(optimized, parts);
}

// Two stages: the second starts from what the first trained, and the stage checkpoint written
// at the first stage's end resumes at the second stage.
TEST_F(BoxTest, MultiStageAdvancesWithStageCheckpoints) {
  const std::string dir = RunDir("multi");
  const DistillConfig config =
      Parse(absl::StrCat(kData, kTeacher, kStudent, "stages {", Stage("warm", 1, kCe), "} stages {",
                         Stage("kd", 2, kKd), "}"));
  auto box = MakeBox(config, {.run_dir = dir});
  ASSERT_THAT(box, IsOk());
  EXPECT_EQ((*box)->kind(), "MultiStagesDistillationBox");
  auto result = (*box)->Run();
  ASSERT_THAT(result, IsOk());
  ASSERT_EQ(result->epochs.size(), 3u);
  EXPECT_EQ(result->epochs[0].stage, "warm");
  EXPECT_EQ(result->epochs[2].stage, "kd");
  auto last = ReadTorchFile(dir + "/ckpt/last.pt");
  ASSERT_THAT(last, IsOk());
  EXPECT_EQ(last->toGenericDict().at("stage_name").toStringRef(), "kd");
  EXPECT_EQ(last->toGenericDict().at("epoch").toInt(), 2);

  // The first stage's checkpoint starts the second stage: a run resumed from it trains the
  // second stage only and ends where the uninterrupted run ended.
  auto warm = ReadTorchFile(dir + "/ckpt/warm.pt");
  ASSERT_THAT(warm, IsOk());
  EXPECT_EQ(warm->toGenericDict().at("stage_name").toStringRef(), "warm");
  EXPECT_EQ(warm->toGenericDict().at("stage").toInt(), 1);
  DistillConfig from_stage = config;
  from_stage.mutable_checkpoint()->set_resume_from(dir + "/ckpt/warm.pt");
  const std::string dir2 = RunDir("multi_resumed");
  auto resumed = (*MakeBox(from_stage, {.run_dir = dir2}))->Run();
  ASSERT_THAT(resumed, IsOk());
  EXPECT_EQ(resumed->epochs_run, 2);
  ExpectSameStudent(dir, dir2);
}

// Parameter groups train only their modules, at their own kwargs
// (torchdistill's module-wise params): a group over "fc" alone trains as
// freezing "hidden" does, and a group over the whole model with lr 0.05 trains
// as an optimizer with lr 0.05 does, bit for bit.
TEST_F(BoxTest, ParamGroupsTrainTheirModulesAtTheirOwnRates) {
  const DistillConfig base =
      Parse(absl::StrCat(kData, kStudent, "train {", Stage("s", 1, kCe), "}"));
  auto run = [&](const std::string& name, const std::function<void(StageConfig&)>& change) {
    const std::string dir = RunDir(name);
    DistillConfig config = base;
    change(*config.mutable_train());
    auto box = MakeBox(config, {.run_dir = dir});
    EXPECT_THAT(box, IsOk()) << name;
    if (box.ok()) {
      EXPECT_THAT((*box)->Run(), IsOk()) << name;
    }
    return dir;
  };
  ExpectSameStudent(run("group_fc",
                        [](StageConfig& stage) {
                          stage.mutable_optimizer()->add_param_groups()->set_module_path("fc");
                        }),
                    run("frozen_hidden", [](StageConfig& stage) {
                      stage.mutable_student()->add_frozen_modules("hidden");
                    }));
  ExpectSameStudent(run("group_lr",
                        [](StageConfig& stage) {
                          Kwarg* lr = stage.mutable_optimizer()->add_param_groups()->add_kwargs();
                          lr->set_name("lr");
                          lr->set_number(0.05);
                        }),
                    run("optimizer_lr", [](StageConfig& stage) {
                      ASSERT_EQ(stage.optimizer().kwargs(0).name(), "lr");
                      stage.mutable_optimizer()->mutable_kwargs(0)->set_number(0.05);
                    }));

  DistillConfig typo = base;
  typo.mutable_train()->mutable_optimizer()->add_param_groups()->set_module_path("fcc");
  EXPECT_THAT(MakeBox(typo, {.run_dir = RunDir("group_typo")}),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("optimizer.param_groups[0]"), HasSubstr("\"fcc\""),
                             HasSubstr("did you mean \"fc\"?"))));
}

// run.precision: BF16 runs forwards and losses under bfloat16 autocast, FP16 under float16
// autocast with loss scaling. The box takes the steps Python takes under torch.autocast (and
// torch.amp.GradScaler) from the same student on the same batches
// (tests/testdata/make_amp_fixtures.py): losses and weights equal, where the three precisions'
// losses differ from one another by 1e-3 and more (on the machine that recorded them the
// losses were equal bit for bit). fp16's and bf16's CPU kernels round differently on different
// kinds of CPU (Python against Python: 1.65e-4 and 2.5e-4 apart at step 1), so both are recorded
// per kind: the box must take the steps of one recording, the one nearest at step 1, within 1e-5
// at every step.
TEST_F(BoxTest, MixedPrecisionTakesPythonsSteps) {
  const c10::IValue expected = test::LoadExpected("amp");
  for (const RunConfig::Precision precision :
       {RunConfig::FP32, RunConfig::BF16, RunConfig::FP16}) {
    const std::string name = absl::AsciiStrToLower(RunConfig::Precision_Name(precision));
    SCOPED_TRACE(name);
    const DistillConfig config = Parse(absl::StrCat(
        R"pb(run { name: "amp" seed: 0 log_every_n_steps: 1 precision: )pb",
        RunConfig::Precision_Name(precision), R"pb( }
             datasets {
               id: "train"
               key: "fashion_mnist"
               kwargs { name: "root" str: ")pb",
        test::FixturePath("amp_data"), R"pb(" }
             }
             student { torchscript: ")pb",
        test::FixturePath("amp_student.pt"), R"pb(" }
             train {
               num_epochs: 1
               train_data_loader { dataset_id: "train" batch_size: 16 }
               optimizer {
                 key: "SGD"
                 kwargs { name: "lr" number: 0.1 }
                 kwargs { name: "momentum" number: 0.9 }
               })pb",
        kCe, "}"));
    std::vector<double> losses;
    const std::string dir = RunDir(name);
    auto box = MakeBox(config, {.run_dir = dir, .on_step = [&](const StepReport& r) {
                                  losses.push_back(r.loss);
                                }});
    ASSERT_THAT(box, IsOk());
    ASSERT_THAT((*box)->Run(), IsOk());
    c10::IValue python = test::At(expected, name);
    ASSERT_EQ(losses.size(), 4u);
    if (precision != RunConfig::FP32 &&
        expected.toGenericDict().contains(name + "_variants")) {
      auto distance = [&](const c10::IValue& recording) {
        return std::abs(losses[1] - test::At(recording, "losses").toTensor()[1].item<double>());
      };
      for (const c10::IValue& variant : test::At(expected, name + "_variants").toListRef()) {
        if (distance(variant) < distance(python)) python = variant;
      }
    }
    const at::Tensor python_losses = test::At(python, "losses").toTensor();
    for (int64_t i = 0; i < 4; ++i) {
      EXPECT_NEAR(losses[i], python_losses[i].item<double>(), 1e-5) << "step " << i;
    }
    auto last = ReadTorchFile(dir + "/ckpt/last.pt");
    ASSERT_THAT(last, IsOk());
    const c10::impl::GenericDict student = last->toGenericDict().at("student").toGenericDict();
    const c10::impl::GenericDict state = test::At(python, "state").toGenericDict();
    ASSERT_EQ(student.size(), state.size());
    for (const auto& entry : state) {
      const at::Tensor mine = student.at(entry.key()).toTensor();
      EXPECT_TRUE(mine.to(at::kDouble).allclose(entry.value().toTensor().to(at::kDouble), 0, 1e-5))
          << entry.key().toStringRef() << ": max difference "
          << (mine.to(at::kDouble) - entry.value().toTensor().to(at::kDouble)).abs().max();
    }
    EXPECT_EQ(last->toGenericDict().contains("grad_scaler"), precision == RunConfig::FP16);
  }
}

// test_data_loader: evaluated once at the end with the best student by
// validation. Tested on the validation data itself, it must give the best
// epoch's validation metrics exactly.
TEST_F(BoxTest, TestSetIsEvaluatedWithTheBestStudent) {
  DistillConfig config =
      Parse(absl::StrCat(kData, kStudent, "train {", Stage("s", 4, kCe), "}",
                         R"pb(test_data_loader { dataset_id: "val" batch_size: 50 })pb"));
  const std::string dir = RunDir("test_set");
  config.mutable_student()->set_dst_ckpt(dir + "/student.pt");
  auto result = (*MakeBox(config, {.run_dir = dir}))->Run();
  ASSERT_THAT(result, IsOk());
  EXPECT_THAT(result->tested_checkpoint, HasSubstr("best.pt"));
  const EpochReport* best = &result->epochs.front();
  for (const EpochReport& epoch : result->epochs) {
    if (epoch.metrics.at("accuracy") > best->metrics.at("accuracy")) best = &epoch;
  }
  EXPECT_EQ(result->test_metrics.at("accuracy"), best->metrics.at("accuracy"));
  EXPECT_NEAR(result->test_metrics.at("loss"), best->metrics.at("loss"), 1e-6);
  // dst_ckpt holds that student too, as torchdistill's scripts save the best one.
  const auto saved = ReadTorchFile(dir + "/student.pt");
  const auto chosen = ReadTorchFile(dir + "/ckpt/best.pt");
  ASSERT_THAT(saved, IsOk());
  ASSERT_THAT(chosen, IsOk());
  for (const auto& entry : chosen->toGenericDict().at("student").toGenericDict()) {
    EXPECT_TRUE(at::equal(saved->toGenericDict().at(entry.key()).toTensor(),
                          entry.value().toTensor()))
        << entry.key().toStringRef();
  }
}

// An auxiliary module (a linear projection of the student's hidden features to the teacher's
// width) feeds a hint term; it trains with the student, lives in the checkpoint, and a resumed
// run ends where an uninterrupted one does, the projection included.
TEST_F(BoxTest, AuxiliaryModulesTrainAndResume) {
  constexpr char kHint[] = R"pb(
    student {
      forward_hooks { module_path: "hidden.0" requires_output: true }
      auxiliary_modules {
        name: "proj"
        key: "linear"
        kwargs { name: "in_features" integer: 16 }
        kwargs { name: "out_features" integer: 32 }
        input { source: STUDENT path: "hidden.0" }
      }
    }
    teacher { forward_hooks { module_path: "hidden.0" requires_output: true } }
    criterion {
      terms {
        key: "CrossEntropyLoss"
        inputs { arg: "input" source: STUDENT }
        inputs { arg: "target" source: TARGETS }
      }
      terms {
        key: "MSELoss"
        inputs { arg: "input" source: STUDENT path: "proj" }
        inputs { arg: "target" source: TEACHER path: "hidden.0" }
      }
    }
  )pb";
  const DistillConfig config =
      Parse(absl::StrCat(kData, kTeacher, kStudent, "train {", Stage("hint", 2, kHint), "}"));
  const std::string whole = RunDir("aux_whole"), parts = RunDir("aux_parts");
  auto result = (*MakeBox(config, {.run_dir = whole}))->Run();
  ASSERT_THAT(result, IsOk());
  EXPECT_GT(result->final_metrics.at("accuracy"), 0.5);
  auto one = ReadTorchFile(whole + "/ckpt/last.pt");
  ASSERT_THAT(one, IsOk());
  const auto aux = one->toGenericDict().at("auxiliary_modules").toGenericDict();
  ASSERT_TRUE(aux.contains("student.proj.weight"));
  EXPECT_EQ(aux.at("student.proj.weight").toTensor().sizes(), (std::vector<int64_t>{32, 16}));

  DistillConfig stopped = config;
  stopped.mutable_train()->set_num_epochs(1);
  ASSERT_THAT((*MakeBox(stopped, {.run_dir = parts}))->Run(), IsOk());
  const at::Tensor after_one = ReadTorchFile(parts + "/ckpt/last.pt")
                                   ->toGenericDict()
                                   .at("auxiliary_modules")
                                   .toGenericDict()
                                   .at("student.proj.weight")
                                   .toTensor();
  ASSERT_THAT((*MakeBox(config, {.run_dir = parts, .resume = true}))->Run(), IsOk());
  ExpectSameStudent(whole, parts);
  const at::Tensor resumed = ReadTorchFile(parts + "/ckpt/last.pt")
                                 ->toGenericDict()
                                 .at("auxiliary_modules")
                                 .toGenericDict()
                                 .at("student.proj.weight")
                                 .toTensor();
  EXPECT_TRUE(at::equal(resumed, aux.at("student.proj.weight").toTensor()));
  EXPECT_FALSE(at::equal(resumed, after_one));  // it trained in the second epoch

  DistillConfig wrong = config;
  wrong.mutable_train()->mutable_student()->mutable_auxiliary_modules(0)->set_key("linaer");
  EXPECT_THAT(MakeBox(wrong, {.run_dir = RunDir("aux_wrong")}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("train.student.auxiliary_modules[0].key: no auxiliary_module "
                                 "\"linaer\" is registered; did you mean \"linear\"?")));
}

// Leak detection in the validation loop: memdiag's callback logs memory stats per batch and a
// diff between batches 1 and 3 of the clean evaluation loop, which holds nothing new.
TEST_F(BoxTest, LeakDetectionWatchesTheValidationLoop) {
  DistillConfig config = Parse(absl::StrCat(kData, kStudent, "train {", Stage("s", 1, kCe), "}"));
  MemoryLeakDetectionConfig* leaks = config.mutable_evaluation()->mutable_memory_leak_detection();
  leaks->add_diff_between_batches(1);
  leaks->add_diff_between_batches(2);
  testing::internal::CaptureStderr();
  auto result = (*MakeBox(config, {.run_dir = RunDir("leaks")}))->Run();
  const std::string log = testing::internal::GetCapturedStderr();
  ASSERT_THAT(result, IsOk());
  EXPECT_THAT(log, HasSubstr("MEMORY [eval_batch_1] alloc="));
  EXPECT_THAT(log, HasSubstr("TENSOR_DIFF [eval_batches_1_to_2] NEW tensors: count=0"));
  EXPECT_THAT(log, HasSubstr("STORAGE_DIFF [eval_batches_1_to_2] NEW storages: count=0"));
}

// Profiling: the schedule counts training steps across the run (8 a epoch here); with wait 1,
// warmup 1, active 2 steps 3 and 4 are recorded and trace_step_4.json is written when step 5
// begins, holding the box's phases as user scopes and the models' ops.
TEST_F(BoxTest, ProfilerTracesTheConfiguredSteps) {
  DistillConfig config =
      Parse(absl::StrCat(kData, kTeacher, kStudent, "train {", Stage("kd", 1, kKd), "}",
                         "profiler { wait: 1 warmup: 1 active: 2 repeat: 1 }"));
  const std::string dir = RunDir("profiled");
  ASSERT_THAT((*MakeBox(config, {.run_dir = dir}))->Run(), IsOk());
  std::vector<std::string> traces;
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/profile")) {
    traces.push_back(entry.path().filename().string());
  }
  EXPECT_THAT(traces, ElementsAre("trace_step_4.json"));
  absl::StatusOr<std::string> trace = ReadFile(dir + "/profile/trace_step_4.json");
  ASSERT_THAT(trace, IsOk());
  for (const char* phase :
       {"data", "teacher_forward", "student_forward", "loss", "backward", "optimizer_step"}) {
    EXPECT_THAT(*trace, HasSubstr(absl::StrCat("\"name\": \"", phase, "\""))) << phase;
  }
  EXPECT_THAT(*trace, HasSubstr("\"name\": \"aten::addmm\""));  // the MLPs' linear layers

  // BoxOptions.profile_dir (//tools:distill --profile_dir) profiles a config without `profiler`
  // into that folder; one that cannot be made is refused before training.
  config.clear_profiler();
  const std::string file = RunDir("not_a_dir");
  std::filesystem::create_directories(std::filesystem::path(file).parent_path());
  std::ofstream(file) << "x";
  EXPECT_THAT(
      (*MakeBox(config, {.run_dir = RunDir("profile_flag"), .profile_dir = file + "/p"}))->Run(),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr("profiler: cannot create the trace directory " + file + "/p")));
}

// A run stopped after epoch 1 and resumed ends where an uninterrupted run ends, bit for bit.
}  // namespace
}  // namespace kd
