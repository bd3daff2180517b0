// The README's and the headers' examples, compiled and run: a native student written as the
// README shows it, hooked next to a TorchScript teacher with one ForwardHookManager.
#include <memory>

#include <ATen/ATen.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "base/status_macros.h"
#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hooks/forward_hook_manager.h"
#include "hooks/hook_point.h"
#include "hooks/native_model.h"
#include "hooks/torchscript_model.h"
#include "testing/fixtures.h"

// --- README.md, "Native models: the one rule" (and hooks/hook_point.h) ---
struct StudentImpl : torch::nn::Module {
  // register_module makes "conv" and "head" submodules: without it they have no path, no
  // hooks and no parameters an optimizer would see.
  StudentImpl()
      : conv(register_module("conv", torch::nn::Conv2d(1, 8, 3))),
        head(register_module("head", kd::HookedSequential(torch::nn::Flatten(),
                                                          torch::nn::Linear(8 * 26 * 26, 10)))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = kd::Call(conv, x);     // hooks on "conv" fire
    return kd::Call(head, x);  // hooks on "head", "head.0", "head.1" fire
  }
  torch::nn::Conv2d conv;
  kd::HookedSequential head;
};
TORCH_MODULE(Student);
// --- end of the README's example ---

namespace kd {
namespace {

// README.md, "Forward hooks": one manager serves teacher and student.
absl::Status ReadmeHookExample(Model& teacher, Model& student, const at::Tensor& x,
                               IoDict& io_out) {
  kd::ForwardHookManager manager(torch::kCPU);              // the target device
  KD_RETURN_IF_ERROR(manager.AddHook(teacher, "layer2"));  // input and output
  KD_RETURN_IF_ERROR(manager.AddHook(teacher, "layer1.0.relu", {.accumulates = true}));
  KD_RETURN_IF_ERROR(manager.AddHook(student, "head.1", {.requires_input = false}));
  teacher.Forward({x});
  student.Forward({x});
  KD_ASSIGN_OR_RETURN(kd::IoDict io, manager.PopIoDict());  // gathered on the target device
  KD_ASSIGN_OR_RETURN(c10::IValue feats, kd::GetIo(io, "layer2", "output"));
  KD_ASSIGN_OR_RETURN(c10::IValue calls, kd::GetIo(io, "layer1.0.relu", "output"));
  if (!feats.isTensor() || !calls.isList()) return absl::InternalError("unexpected values");
  io_out = std::move(io);
  return absl::OkStatus();
}

TEST(ExamplesTest, NativeStudentAsTheReadmeWritesIt) {
  torch::manual_seed(0);
  std::unique_ptr<Model> student = MakeNativeModel(Student().ptr());
  std::vector<std::string> paths;
  for (const ModuleInfo& m : student->NamedModules()) paths.push_back(m.path);
  EXPECT_THAT(paths, ::testing::ElementsAre("", "conv", "head", "head.0", "head.1"));
  // Conv2d(1, 8, 3): 72 + 8; Linear(5408, 10): 54080 + 10.
  EXPECT_EQ(student->NumParameters(), 80 + 54090);

  ForwardHookManager manager(torch::kCPU);
  for (const char* path : {"conv", "head", "head.0", "head.1"}) {
    ASSERT_THAT(manager.AddHook(*student, path), IsOk());
  }
  const at::Tensor x = at::randn({2, 1, 28, 28});
  const at::Tensor y = student->Forward({x}).toTensor();
  absl::StatusOr<IoDict> io = manager.PopIoDict();
  ASSERT_THAT(io, IsOk());
  EXPECT_EQ((*io)["conv"]["output"].toTensor().sizes(), (std::vector<int64_t>{2, 8, 26, 26}));
  EXPECT_TRUE(at::equal((*io)["head.0"]["output"].toTensor(),
                        (*io)["conv"]["output"].toTensor().flatten(1)));
  EXPECT_TRUE(at::equal((*io)["head.1"]["output"].toTensor(), y));
  EXPECT_TRUE(at::equal((*io)["head"]["output"].toTensor(), y));
}

TEST(ExamplesTest, OneManagerForTeacherAndStudent) {
  absl::StatusOr<std::unique_ptr<Model>> teacher =
      LoadTorchScriptModel(test::FixturePath("small_cnn.pt"));
  ASSERT_THAT(teacher, IsOk());
  (*teacher)->SetTraining(false);
  std::unique_ptr<Model> student = MakeNativeModel(Student().ptr());
  IoDict io;
  ASSERT_THAT(ReadmeHookExample(**teacher, *student, at::randn({2, 1, 28, 28}), io), IsOk());
  EXPECT_EQ(io.at("layer1.0.relu").at("output").toListRef().size(), 2u);  // relu runs twice
  EXPECT_FALSE(io.at("head.1").count("input"));
}

}  // namespace
}  // namespace kd
