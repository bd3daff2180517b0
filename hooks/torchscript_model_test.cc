#include "hooks/torchscript_model.h"

#include <map>
#include <random>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/jit/api/module.h>

#include "base/file_util.h"
#include "base/torch_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fixture_models.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace {

using ::kd::test::IValueNear;

using ::kd::test::AllClose;
using ::kd::test::At;
using ::kd::test::FixtureInputs;
using ::kd::test::FixturePath;
using ::kd::test::LoadExpected;
using ::kd::test::TapRecorder;
using ::kd::test::TorchScriptFixture;
using ::testing::HasSubstr;

TEST(TorchScriptModelTest, ModulesAndParameterCountEqualPython) {
  for (const std::string name : {"small_cnn", "tricky"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Model> model = TorchScriptFixture(name);
    const c10::IValue expected = LoadExpected(name);
    std::vector<std::string> actual_modules;
    for (const ModuleInfo& m : model->NamedModules())
      actual_modules.push_back(m.path + "|" + m.type);
    std::vector<std::string> expected_modules;
    for (const c10::IValue& m : At(expected, "modules").toTupleRef().elements()) {
      expected_modules.push_back(m.toStringRef());
    }
    EXPECT_EQ(actual_modules, expected_modules);
    EXPECT_EQ(model->NumParameters(), At(expected, "num_params").toInt());
    EXPECT_EQ(model->kind(), "torchscript");
  }
}

TEST(TorchScriptModelTest, ForwardEqualsPython) {
  for (const std::string name : {"small_cnn", "tricky"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Model> model = TorchScriptFixture(name);
    const c10::IValue expected = LoadExpected(name);
    EXPECT_THAT(model->Forward(FixtureInputs(expected)), IValueNear(At(expected, "output"), 1e-5));
  }
}

// A file saved by torch 1.13 (make_fixtures.py run with torch 1.13.1, kept as it was) loads,
// computes what torch 1.13 recorded, and what today's file of the same model computes.
TEST(TorchScriptModelTest, FileSavedByTorch113LoadsAndMatches) {
  std::unique_ptr<Model> old_model = TorchScriptFixture("small_cnn_torch113");
  const c10::IValue old_expected = LoadExpected("small_cnn_torch113");
  const std::vector<c10::IValue> inputs = FixtureInputs(old_expected);
  const c10::IValue old_output = old_model->Forward(inputs);
  EXPECT_THAT(old_output, IValueNear(At(old_expected, "output"), 1e-5));
  for (const char* path : {"stem", "layer2.0", "fc"}) {
    SCOPED_TRACE(path);
    TapRecorder recorder;
    absl::StatusOr<HookHandle> tap = old_model->AddHook(path, recorder.Fn());
    ASSERT_THAT(tap, IsOk());
    old_model->Forward(inputs);
    EXPECT_THAT(recorder.outputs.back(),
                IValueNear(test::LastPythonHook(old_expected, path, "output"), 1e-5));
  }
  std::unique_ptr<Model> new_model = TorchScriptFixture("small_cnn");
  EXPECT_THAT(new_model->Forward(inputs), IValueNear(old_output, 1e-5));
}

TEST(TorchScriptModelTest, KwargsAndDefaults) {
  std::unique_ptr<Model> model = TorchScriptFixture("tricky");
  const c10::IValue expected = LoadExpected("tricky");
  const c10::IValue x = FixtureInputs(expected)[0];
  EXPECT_THAT(model->Forward({x}, {{"scale", 2.0}}), IValueNear(At(expected, "output"), 1e-5));
  // scale defaults to 1.0: the first output is then lin(s) * 1.0, half of the recorded one.
  c10::IValue half = model->Forward({x});
  EXPECT_THAT(half.toTupleRef().elements()[0],
              IValueNear(At(expected, "output").toTupleRef().elements()[0].toTensor() / 2, 1e-5));
}

TEST(TorchScriptModelTest, TrainingFlagReachesSubmodules) {
  std::unique_ptr<Model> model = TorchScriptFixture("small_cnn");
  const c10::IValue expected = LoadExpected("small_cnn");
  model->SetTraining(true);
  EXPECT_TRUE(model->is_training());
  // Batch statistics instead of running statistics: a different output.
  EXPECT_FALSE(at::allclose(model->Forward(FixtureInputs(expected)).toTensor(),
                            At(expected, "output").toTensor(), 0, 1e-3));
  model->SetTraining(false);
  EXPECT_FALSE(model->is_training());
}

TEST(TorchScriptModelTest, UnknownPathNamesNearest) {
  std::unique_ptr<Model> model = TorchScriptFixture("small_cnn");
  EXPECT_THAT(model->CheckModulePath("layer1.0.conv1"), IsOk());
  EXPECT_THAT(model->CheckModulePath(""), IsOk());
  EXPECT_THAT(model->CheckModulePath("layer5"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("no module \"layer5\" in this torchscript model; "
                                 "did you mean \"layer1\" or \"layer2\"?")));
  EXPECT_THAT(model->CheckModulePath("layer1.0.conv"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("did you mean \"layer1.0.conv1\" or \"layer1.0.conv2\"?")));
}

TEST(TorchScriptModelTest, MissingCorruptAndWrongFilesNameTheFile) {
  EXPECT_THAT(LoadTorchScriptModel("/nonexistent/model.pt"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("/nonexistent/model.pt: cannot open: No such file")));
  const std::string garbage = test::TempPath("garbage.pt");
  ASSERT_THAT(WriteFileAtomically(garbage, "this is not a model"), IsOk());
  EXPECT_THAT(
      LoadTorchScriptModel(garbage),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(garbage + ": not a zip archive (19 bytes beginning 0x74), so neither "
                                   "torch.jit.save nor torch.save wrote it")));
  // A truncated archive.
  auto bytes = ReadFile(FixturePath("small_cnn.pt"));
  ASSERT_THAT(bytes, IsOk());
  const std::string truncated = test::TempPath("truncated.pt");
  ASSERT_THAT(WriteFileAtomically(truncated, bytes->substr(0, bytes->size() / 2)), IsOk());
  EXPECT_THAT(LoadTorchScriptModel(truncated),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(truncated + ": a zip archive cut short")));
  // One flipped bit in a tensor record: libtorch would load it silently.
  std::string flipped = *bytes;
  const size_t record = flipped.find("small_cnn/data/7");
  ASSERT_NE(record, std::string::npos);
  flipped[record + 16 + 100] ^= 0x04;  // inside data/7's 2304 bytes (after name, padding)
  const std::string corrupted = test::TempPath("corrupted.pt");
  ASSERT_THAT(WriteFileAtomically(corrupted, flipped), IsOk());
  EXPECT_THAT(LoadTorchScriptModel(corrupted),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr(corrupted + ": record \"small_cnn/data/7\" is corrupted")));
  // A torch.save'd state dict is a zip archive too, but no module.
  EXPECT_THAT(LoadTorchScriptModel(FixturePath("small_cnn.state.pt")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("small_cnn.state.pt: is a torch.save archive, not a TorchScript "
                                 "module: export the model with torch.jit.script(model).save")));
  // A newer PyTorch's file is named so, not called "not TorchScript".
  EXPECT_THAT(
      LoadTorchScriptModel(FixturePath("small_cnn.future_version.pt")),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("small_cnn.future_version.pt: was written by a newer PyTorch (file "
                         "format version 99; this libtorch reads up to 10)")));
  // The legacy torch.save format is named as such.
  EXPECT_THAT(LoadTorchScriptModel(FixturePath("small_cnn.legacy_state.pt")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("small_cnn.legacy_state.pt: a legacy torch.save file")));
}

// libtorch checks no CRC: before libkd verified them, 46 of 150 randomly corrupted copies of a
// fixture loaded. Now a copy either fails to load or loads the same module (the byte was one
// no record covers: a timestamp, alignment padding) and computes the same output.
TEST(TorchScriptModelTest, RandomlyCorruptedCopiesNeverLoadChanged) {
  absl::StatusOr<std::string> bytes = ReadFile(FixturePath("small_cnn.pt"));
  ASSERT_THAT(bytes, IsOk());
  const c10::IValue expected = LoadExpected("small_cnn");
  // The intact file's output on this machine: a copy that loads must compute exactly it (the
  // fixture's Python output agrees to ~1e-7 only, depending on the CPU's kernels).
  at::NoGradGuard no_grad;
  const c10::IValue intact = TorchScriptFixture("small_cnn")->Forward(FixtureInputs(expected));
  std::mt19937 random(20261201);
  int refused = 0;
  for (int copy = 0; copy < 150; ++copy) {
    std::string corrupted = *bytes;
    const size_t at = std::uniform_int_distribution<size_t>(0, corrupted.size() - 1)(random);
    corrupted[at] = static_cast<char>(corrupted[at] ^ (1 + random() % 255));
    const std::string path = test::TempPath("random_corruption.pt");
    ASSERT_THAT(WriteFileAtomically(path, corrupted), IsOk());
    absl::StatusOr<std::unique_ptr<Model>> model = LoadTorchScriptModel(path);
    if (!model.ok()) {
      ++refused;
      continue;
    }
    EXPECT_THAT((*model)->Forward(FixtureInputs(expected)), IValueNear(intact, 0.0))
        << "byte " << at << " changed and the model loaded";
  }
  EXPECT_GT(refused, 100);  // most bytes are covered by a CRC or the zip structure
}

TEST(TorchScriptModelTest, StateRoundTripAndPythonStateDict) {
  std::unique_ptr<Model> model = TorchScriptFixture("small_cnn");
  const c10::IValue expected = LoadExpected("small_cnn");
  const std::string path = test::TempPath("small_cnn_state.pt");
  ASSERT_THAT(model->SaveState(path), IsOk());
  {
    at::NoGradGuard no_grad;
    for (auto& [name, p] : model->NamedParameters()) p.zero_();
  }
  EXPECT_THAT(model->Forward(FixtureInputs(expected)),
              ::testing::Not(IValueNear(At(expected, "output"), 1e-5)));
  ASSERT_THAT(model->LoadState(path), IsOk());
  EXPECT_THAT(model->Forward(FixtureInputs(expected)), IValueNear(At(expected, "output"), 1e-5));

  // A state_dict written by Python's torch.save loads too.
  {
    at::NoGradGuard no_grad;
    for (auto& [name, p] : model->NamedParameters()) p.zero_();
  }
  ASSERT_THAT(model->LoadState(FixturePath("small_cnn.state.pt")), IsOk());
  EXPECT_THAT(model->Forward(FixtureInputs(expected)), IValueNear(At(expected, "output"), 1e-5));
}

TEST(TorchScriptModelTest, StateOfAnotherModelIsRejectedWithKeys) {
  std::unique_ptr<Model> tricky = TorchScriptFixture("tricky");
  const std::string path = test::TempPath("tricky_state.pt");
  ASSERT_THAT(tricky->SaveState(path), IsOk());
  std::unique_ptr<Model> cnn = TorchScriptFixture("small_cnn");
  EXPECT_THAT(cnn->LoadState(path), StatusIs(absl::StatusCode::kInvalidArgument,
                                             AllOf(HasSubstr(path + ": does not fit this model"),
                                                   HasSubstr("missing keys: stem.0.weight"),
                                                   HasSubstr("unexpected keys: lin.bias"))));
  EXPECT_THAT(cnn->LoadState("/nonexistent/state.pt"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/state.pt")));
}

// What Python users save, which libtorch's unpickler cannot read, loads (base/python_pickle.h):
// torch.save(model.state_dict()) (an OrderedDict), and a checkpoint of torchdistill's own
// save_ckpt ({'model': OrderedDict, 'optimizer', 'best_value', 'lr_scheduler', 'args':
// argparse.Namespace}), whose model state loads as torchdistill's load_ckpt loads it. The
// values are checked against the same state saved as a plain dict, which libtorch's own
// unpickler reads (tests/testdata/make_torchdistill_ckpt.py).
TEST(TorchScriptModelTest, PythonStateDictsAndTorchdistillCheckpointsLoad) {
  std::unique_ptr<Model> tricky = TorchScriptFixture("tricky");
  std::vector<NamedTensor> original = tricky->NamedParameters();
  for (auto& [name, t] : original) t = t.clone();  // the fixture's values, not the parameters
  {
    c10::NoGradGuard no_grad;
    for (const auto& [name, p] : tricky->NamedParameters()) at::Tensor(p).zero_();
  }
  ASSERT_THAT(tricky->LoadState(FixturePath("tricky.ordered_state.pt")), IsOk());
  for (size_t i = 0; i < original.size(); ++i) {
    EXPECT_TRUE(at::equal(tricky->NamedParameters()[i].second, original[i].second))
        << original[i].first;
  }

  const std::string ckpt = FixturePath("tricky.torchdistill_ckpt.pt");
  ASSERT_THAT(tricky->LoadState(ckpt), IsOk());
  absl::StatusOr<c10::IValue> expected =
      ReadTorchFile(FixturePath("tricky.torchdistill_expected.pt"));
  ASSERT_THAT(expected, IsOk());
  int compared = 0;
  for (const auto& [name, p] : tricky->NamedParameters()) {
    const at::Tensor want = expected->toGenericDict().at(name).toTensor();
    EXPECT_TRUE(at::equal(p, want)) << name;
    EXPECT_FALSE(at::equal(want, original[compared].second)) << name;  // loading changed it
    ++compared;
  }
  EXPECT_EQ(compared, 4);

  // The checkpoint's other parts, as Python reads them (argparse.Namespace, not plain data, is
  // None: no code of the file runs).
  absl::StatusOr<c10::IValue> whole = ReadTorchFile(ckpt);
  ASSERT_THAT(whole, IsOk());
  const c10::impl::GenericDict dict = whole->toGenericDict();
  EXPECT_DOUBLE_EQ(dict.at("best_value").toDouble(), 0.75);
  EXPECT_TRUE(dict.at("args").isNone());
  const c10::impl::GenericDict scheduler = dict.at("lr_scheduler").toGenericDict();
  EXPECT_EQ(scheduler.at("step_size").toInt(), 3);
  EXPECT_DOUBLE_EQ(scheduler.at("gamma").toDouble(), 0.5);
  EXPECT_DOUBLE_EQ(scheduler.at("base_lrs").toList().get(0).toDouble(), 0.1);
  const c10::impl::GenericDict optimizer = dict.at("optimizer").toGenericDict();
  const c10::impl::GenericDict state = optimizer.at("state").toGenericDict();
  EXPECT_EQ(state.size(), 2u);  // lin.weight and lin.bias stepped; momentum buffers by index
  EXPECT_EQ(state.at(int64_t{0}).toGenericDict().at("momentum_buffer").toTensor().sizes(),
            expected->toGenericDict().at("lin.weight").toTensor().sizes());
  EXPECT_DOUBLE_EQ(
      optimizer.at("param_groups").toList().get(0).toGenericDict().at("lr").toDouble(), 0.1);
}

TEST(TorchScriptModelTest, TapsSeeWhatPythonHooksSaw) {
  for (const std::string name : {"small_cnn", "tricky"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Model> model = TorchScriptFixture(name);
    const c10::IValue expected = LoadExpected(name);
    const auto& hooks = At(expected, "hooks").toGenericDict();
    std::vector<std::unique_ptr<TapRecorder>> recorders;
    std::vector<HookHandle> handles;
    for (const auto& entry : hooks) {
      recorders.push_back(std::make_unique<TapRecorder>());
      auto handle = model->AddHook(entry.key().toStringRef(), recorders.back()->Fn());
      ASSERT_THAT(handle, IsOk());
      handles.push_back(*std::move(handle));
    }
    EXPECT_THAT(model->Forward(FixtureInputs(expected)), IValueNear(At(expected, "output"), 1e-5));
    size_t i = 0;
    for (const auto& entry : hooks) {
      SCOPED_TRACE(entry.key().toStringRef());
      const TapRecorder& r = *recorders[i++];
      EXPECT_THAT(c10::ivalue::Tuple::create(r.inputs),
                  IValueNear(At(entry.value(), "input"), 1e-5));
      EXPECT_THAT(c10::ivalue::Tuple::create(r.outputs),
                  IValueNear(At(entry.value(), "output"), 1e-5));
    }
  }
}

TEST(TorchScriptModelTest, TracedModuleTapsSeeWhatPythonHooksSaw) {
  // torch.jit.trace keeps submodule calls as method calls too: the same taps work.
  std::unique_ptr<Model> model = TorchScriptFixture("small_cnn_traced");
  const c10::IValue expected = LoadExpected("small_cnn");
  std::map<std::string, TapRecorder> recorders;
  std::vector<HookHandle> handles;
  for (const auto& entry : At(expected, "hooks").toGenericDict()) {
    auto handle =
        model->AddHook(entry.key().toStringRef(), recorders[entry.key().toStringRef()].Fn());
    ASSERT_THAT(handle, IsOk());
    handles.push_back(*std::move(handle));
  }
  EXPECT_THAT(model->Forward(FixtureInputs(expected)), IValueNear(At(expected, "output"), 1e-5));
  for (const auto& entry : At(expected, "hooks").toGenericDict()) {
    SCOPED_TRACE(entry.key().toStringRef());
    const TapRecorder& r = recorders[entry.key().toStringRef()];
    EXPECT_THAT(c10::ivalue::Tuple::create(r.inputs), IValueNear(At(entry.value(), "input"), 1e-5));
    EXPECT_THAT(c10::ivalue::Tuple::create(r.outputs),
                IValueNear(At(entry.value(), "output"), 1e-5));
  }
}

TEST(TorchScriptModelTest, CallsInLoopsAndBranchesAreTapped) {
  std::unique_ptr<Model> model = TorchScriptFixture("tricky");
  const c10::IValue x = FixtureInputs(LoadExpected("tricky"))[0];
  TapRecorder act, lin;
  auto act_tap = model->AddHook("act", act.Fn());
  auto lin_tap = model->AddHook("lin", lin.Fn());
  ASSERT_THAT(act_tap, IsOk());
  ASSERT_THAT(lin_tap, IsOk());
  model->Forward({x, 2.0});
  EXPECT_EQ(act.outputs.size(), 3u);  // the loop runs three times
  EXPECT_EQ(lin.outputs.size(), 2u);  // before the loop, and in the taken branch
  model->Forward({x, 0.1});
  EXPECT_EQ(act.outputs.size(), 6u);
  EXPECT_EQ(lin.outputs.size(), 3u);  // the branch is not taken
}

TEST(TorchScriptModelTest, ModuleThatForwardNeverCallsIsRefused) {
  std::unique_ptr<Model> model = TorchScriptFixture("tricky");
  TapRecorder r;
  EXPECT_THAT(model->AddHook("unused", r.Fn()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("module \"unused\" (Linear) exists but forward never calls it")));
  EXPECT_THAT(model->AddHook("mixx", r.Fn()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("did you mean \"mix\"?")));
}

TEST(TorchScriptModelTest, RootTapSeesArgsAndOutput) {
  std::unique_ptr<Model> model = TorchScriptFixture("small_cnn");
  const c10::IValue expected = LoadExpected("small_cnn");
  TapRecorder root;
  auto tap = model->AddHook("", root.Fn());
  ASSERT_THAT(tap, IsOk());
  model->Forward(FixtureInputs(expected));
  ASSERT_EQ(root.outputs.size(), 1u);
  EXPECT_THAT(root.inputs[0], IValueNear(FixtureInputs(expected)[0], 1e-5));
  EXPECT_THAT(root.outputs[0], IValueNear(At(expected, "output"), 1e-5));
}

TEST(TorchScriptModelTest, LoadedModuleIsNeverModifiedAndRemovalRestores) {
  std::unique_ptr<Model> model = TorchScriptFixture("small_cnn");
  const c10::IValue expected = LoadExpected("small_cnn");
  const torch::jit::Module* module = GetTorchScriptModule(*model);
  ASSERT_NE(module, nullptr);
  const std::string graph_before = module->get_method("forward").graph()->toString();
  const size_t methods_before = module->get_methods().size();
  TapRecorder r;
  {
    auto tap = model->AddHook("layer1.1.conv2", r.Fn());
    ASSERT_THAT(tap, IsOk());
    model->Forward(FixtureInputs(expected));
    EXPECT_EQ(r.outputs.size(), 1u);
  }  // the handle removes the tap
  model->Forward(FixtureInputs(expected));
  EXPECT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(module->get_method("forward").graph()->toString(), graph_before);
  EXPECT_EQ(module->get_methods().size(), methods_before);
}

TEST(TorchScriptModelTest, TapsFollowParameterChanges) {
  // The tapped forward runs on the module itself, so later parameter changes are seen.
  std::unique_ptr<Model> model = TorchScriptFixture("small_cnn");
  const c10::IValue expected = LoadExpected("small_cnn");
  TapRecorder fc;
  auto tap = model->AddHook("fc", fc.Fn());
  ASSERT_THAT(tap, IsOk());
  model->Forward(FixtureInputs(expected));
  {
    at::NoGradGuard no_grad;
    for (auto& [name, p] : model->NamedParameters()) {
      if (name == "fc.bias") p.add_(1.0);
    }
  }
  const at::Tensor out = model->Forward(FixtureInputs(expected)).toTensor();
  EXPECT_THAT(out, IValueNear(At(expected, "output").toTensor() + 1.0, 1e-5));
  EXPECT_THAT(fc.outputs.back(), IValueNear(out, 1e-5));
}

TEST(TorchScriptModelTest, ToConvertsFloatingTensorsOnly) {
  std::unique_ptr<Model> model = TorchScriptFixture("small_cnn");
  const c10::IValue expected = LoadExpected("small_cnn");
  model->To(c10::Device(c10::kCPU), at::kDouble);
  for (const auto& [name, p] : model->NamedParameters()) {
    EXPECT_EQ(p.scalar_type(), at::kDouble) << name;
  }
  for (const auto& [name, b] : model->NamedBuffers()) {
    EXPECT_EQ(b.scalar_type(),
              name.find("num_batches_tracked") != std::string::npos ? at::kLong : at::kDouble)
        << name;
  }
  const at::Tensor x = FixtureInputs(expected)[0].toTensor().to(at::kDouble);
  EXPECT_THAT(model->Forward({x}), IValueNear(At(expected, "output"), 1e-5));
}

}  // namespace
}  // namespace kd
