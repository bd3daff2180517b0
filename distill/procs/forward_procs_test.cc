#include "distill/procs/forward_procs.h"

#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/nn/module.h>

#include "testing/status_matchers.h"
#include "distill/procs/proc_func.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hooks/native_model.h"
#include "hooks/torchscript_model.h"
#include "testing/fixture_models.h"
#include "testing/fixtures.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace {

using ::kd::test::IValueNear;

using ::kd::test::AllClose;
using ::kd::test::At;
using ::kd::test::LoadExpected;
using ::testing::HasSubstr;

// TorchScript built in C++: x * scale, plus the targets and supp["bias"] when given.
std::unique_ptr<Model> TorchScriptProbe() {
  torch::jit::Module module("Probe");
  module.define(R"(
    def forward(self, x: Tensor, targets: Optional[Tensor] = None,
                supp: Optional[Dict[str, Tensor]] = None, scale: float = 1.0):
        out = x * scale
        if targets is not None:
            out = out + targets
        if supp is not None:
            out = out + supp["bias"]
        return out
  )");
  return MakeTorchScriptModel(module);
}

// TorchScript whose second argument is the supp dict.
std::unique_ptr<Model> TorchScriptSuppProbe() {
  torch::jit::Module module("SuppProbe");
  module.define(R"(
    def forward(self, x: Tensor, supp: Dict[str, Tensor]):
        return x + supp["bias"]
  )");
  return MakeTorchScriptModel(module);
}

// What a native model's forward received.
struct Received {
  std::vector<c10::IValue> args;
  Kwargs kwargs;
};

// A native model that records its arguments and returns how many calls it has seen.
std::unique_ptr<Model> NativeProbe(std::vector<Received>* received) {
  return MakeNativeModel(std::make_shared<torch::nn::Module>("Probe"),
                         [received](std::vector<c10::IValue>& args, const Kwargs& kwargs) {
                           received->push_back({args, kwargs});
                           return c10::IValue(static_cast<int64_t>(received->size()));
                         });
}

c10::IValue SuppDict(const at::Tensor& bias) {
  c10::Dict<std::string, at::Tensor> supp;
  supp.insert("bias", bias);
  return supp;
}

class ForwardProcsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::manual_seed(0);
    x_ = at::randn({2, 3});
    targets_ = at::randn({2, 3});
    bias_ = at::randn({2, 3});
  }

  // The forward process registered under `key`, called as a box would call it.
  absl::StatusOr<c10::IValue> Run(absl::string_view key, Model& model, const Batch& batch,
                                  const Kwargs& kwargs = {}) {
    absl::StatusOr<ProcFunc<ForwardProc>> proc = BuildProcFunc<ForwardProc>(key);
    if (!proc.ok()) return proc.status();
    return (*proc)(model, batch, kwargs);
  }

  at::Tensor x_, targets_, bias_;
};

TEST_F(ForwardProcsTest, ForwardAllPassesEverythingOnTorchScript) {
  std::unique_ptr<Model> probe = TorchScriptProbe();
  Batch batch{x_, targets_, SuppDict(bias_)};
  auto out = Run("forward_all", *probe, batch, {{"scale", 2.0}});
  ASSERT_THAT(out, IsOk());
  EXPECT_THAT(*out, IValueNear(x_ * 2 + targets_ + bias_, 1e-5));
  // Without targets and supp, None is passed in their places.
  auto bare = Run("forward_all", *probe, Batch{x_, c10::IValue(), c10::IValue()});
  ASSERT_THAT(bare, IsOk());
  EXPECT_THAT(*bare, IValueNear(x_, 1e-5));
}

TEST_F(ForwardProcsTest, BatchOnlyTargetAndSuppOnTorchScript) {
  std::unique_ptr<Model> probe = TorchScriptProbe();
  Batch batch{x_, targets_, SuppDict(bias_)};
  auto only = Run("forward_batch_only", *probe, batch);
  ASSERT_THAT(only, IsOk());
  EXPECT_THAT(*only, IValueNear(x_, 1e-5));
  auto with_targets = Run("forward_batch_target", *probe, batch);
  ASSERT_THAT(with_targets, IsOk());
  EXPECT_THAT(*with_targets, IValueNear(x_ + targets_, 1e-5));
  std::unique_ptr<Model> supp_probe = TorchScriptSuppProbe();
  auto with_supp = Run("forward_batch_supp_dict", *supp_probe, batch);
  ASSERT_THAT(with_supp, IsOk());
  EXPECT_THAT(*with_supp, IValueNear(x_ + bias_, 1e-5));
}

TEST_F(ForwardProcsTest, DictBatchAsKwargsOnTorchScript) {
  std::unique_ptr<Model> probe = TorchScriptProbe();
  c10::impl::GenericDict samples(c10::StringType::get(), c10::AnyType::get());
  samples.insert("x", x_);
  samples.insert("targets", targets_);
  samples.insert("scale", 3.0);
  auto out =
      Run("forward_batch_only_as_kwargs", *probe, Batch{samples, c10::IValue(), c10::IValue()});
  ASSERT_THAT(out, IsOk());
  EXPECT_THAT(*out, IValueNear(x_ * 3 + targets_, 1e-5));

  EXPECT_THAT(Run("forward_batch_only_as_kwargs", *probe, Batch{x_, c10::IValue(), c10::IValue()}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "forward_batch_only_as_kwargs passes the samples as keyword arguments, so "
                       "they must be a dict with string keys; got Tensor"));
}

// small_cnn as either kind of model, with the input and output Python recorded.
class ForwardProcsOnFixtureTest : public ::testing::TestWithParam<test::ModelKind> {
 protected:
  absl::StatusOr<c10::IValue> Run(absl::string_view key, Model& model, const at::Tensor& samples) {
    absl::StatusOr<ProcFunc<ForwardProc>> proc = BuildProcFunc<ForwardProc>(key);
    if (!proc.ok()) return proc.status();
    return (*proc)(model, Batch{samples, c10::IValue(), c10::IValue()});
  }
};

TEST_P(ForwardProcsOnFixtureTest, BatchOnlyAndSskdEqualPython) {
  std::unique_ptr<Model> model = test::SmallCnnModel(GetParam());
  const c10::IValue expected = LoadExpected("small_cnn");
  const at::Tensor input = test::FixtureInputs(expected)[0].toTensor();  // 2x1x28x28
  auto only = Run("forward_batch_only", *model, input);
  ASSERT_THAT(only, IsOk());
  EXPECT_THAT(*only, IValueNear(At(expected, "output"), 1e-5));
  // SSKD batches hold several views per sample: [N, V, C, H, W] runs as [N * V, C, H, W].
  auto sskd = Run("forward_batch4sskd", *model, input.view({1, 2, 1, 28, 28}));
  ASSERT_THAT(sskd, IsOk());
  EXPECT_THAT(*sskd, IValueNear(At(expected, "output"), 1e-5));

  EXPECT_THAT(Run("forward_batch4sskd", *model, at::zeros({28, 28})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "forward_batch4sskd needs samples that are a tensor [..., C, H, W]; got a "
                       "2-d tensor"));
}

INSTANTIATE_TEST_SUITE_P(BothKinds, ForwardProcsOnFixtureTest, test::kBothKinds,
                         test::ModelKindName);

TEST_F(ForwardProcsTest, EachProcessPassesWhatTorchdistillPassesToANativeModel) {
  std::vector<Received> received;
  std::unique_ptr<Model> probe = NativeProbe(&received);
  const c10::IValue supp = SuppDict(bias_);
  Batch batch{x_, targets_, supp};

  ASSERT_THAT(Run("forward_all", *probe, batch, {{"scale", 2.0}}), IsOk());
  ASSERT_THAT(Run("forward_batch_only", *probe, batch, {{"ignored", 1.0}}), IsOk());
  ASSERT_THAT(Run("forward_batch_target", *probe, batch), IsOk());
  ASSERT_THAT(Run("forward_batch_supp_dict", *probe, batch), IsOk());
  c10::impl::GenericDict samples(c10::StringType::get(), c10::AnyType::get());
  samples.insert("x", x_);
  samples.insert("scale", 3.0);
  ASSERT_THAT(Run("forward_batch_only_as_kwargs", *probe, Batch{samples, targets_, supp}), IsOk());
  const at::Tensor views = at::randn({2, 4, 1, 5, 5});
  ASSERT_THAT(Run("forward_batch4sskd", *probe, Batch{views, targets_, supp}), IsOk());
  ASSERT_EQ(received.size(), 6u);

  // forward_all: (samples, targets, supp) and the kwargs.
  ASSERT_EQ(received[0].args.size(), 3u);
  EXPECT_TRUE(received[0].args[0].toTensor().is_same(x_));
  EXPECT_TRUE(received[0].args[1].toTensor().is_same(targets_));
  EXPECT_TRUE(received[0].args[2].is(supp));
  ASSERT_EQ(received[0].kwargs.size(), 1u);
  EXPECT_EQ(received[0].kwargs.at("scale").toDouble(), 2.0);
  // forward_batch_only: the samples alone; its kwargs are not passed on.
  ASSERT_EQ(received[1].args.size(), 1u);
  EXPECT_TRUE(received[1].args[0].toTensor().is_same(x_));
  EXPECT_TRUE(received[1].kwargs.empty());
  // forward_batch_target: (samples, targets).
  ASSERT_EQ(received[2].args.size(), 2u);
  EXPECT_TRUE(received[2].args[1].toTensor().is_same(targets_));
  // forward_batch_supp_dict: (samples, supp).
  ASSERT_EQ(received[3].args.size(), 2u);
  EXPECT_TRUE(received[3].args[1].is(supp));
  // forward_batch_only_as_kwargs: no positional arguments, the dict's entries as kwargs.
  EXPECT_TRUE(received[4].args.empty());
  ASSERT_EQ(received[4].kwargs.size(), 2u);
  EXPECT_TRUE(received[4].kwargs.at("x").toTensor().is_same(x_));
  EXPECT_EQ(received[4].kwargs.at("scale").toDouble(), 3.0);
  // forward_batch4sskd: [2, 4, 1, 5, 5] viewed as [8, 1, 5, 5], sharing the storage.
  ASSERT_EQ(received[5].args.size(), 1u);
  const at::Tensor viewed = received[5].args[0].toTensor();
  EXPECT_EQ(viewed.sizes(), (std::vector<int64_t>{8, 1, 5, 5}));
  EXPECT_EQ(viewed.data_ptr(), views.data_ptr());
  // identity (torchdistill's EmptyModule): the model not called, the samples its output.
  auto same = Run("identity", *probe, batch);
  ASSERT_THAT(same, IsOk());
  EXPECT_TRUE(same->toTensor().is_same(x_));
  EXPECT_EQ(received.size(), 6u);
}

TEST_F(ForwardProcsTest, ModelErrorsBecomeStatusesNamingTheProcess) {
  std::unique_ptr<Model> supp_probe = TorchScriptSuppProbe();
  // forward_batch_target passes a tensor where this model wants the supp dict.
  auto out = Run("forward_batch_target", *supp_probe, Batch{x_, targets_, c10::IValue()});
  EXPECT_THAT(out, StatusIs(absl::StatusCode::kInternal,
                            HasSubstr("forward_proc \"forward_batch_target\" failed: ")));
}

}  // namespace
}  // namespace kd
