#include "distill/boxes/io_util.h"

#include <ATen/ATen.h>

#include "distill/models/model_registry.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// As a config writes them: only the output of "fc", both sides of "hidden.0"; proto3 leaves
// unset flags false, which must not turn into HookOptions' true.
TEST(IoUtilTest, SetHooksCopiesTheFlagsAsWritten) {
  auto model = MakeRegisteredModel("mlp", {{"in_features", int64_t{4}},
                                           {"hidden", c10::List<int64_t>({3})},
                                           {"num_classes", int64_t{2}}});
  ASSERT_THAT(model, IsOk());
  StageModelConfig config;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        forward_hooks { module_path: "fc" requires_output: true }
        forward_hooks { module_path: "hidden.0" requires_input: true requires_output: true }
      )pb",
      &config));
  ForwardHookManager hooks;
  ASSERT_THAT(SetHooks(hooks, **model, config), IsOk());
  (*model)->Forward({at::randn({5, 4})});
  auto io = hooks.PopIoDict();
  ASSERT_THAT(io, IsOk());
  EXPECT_EQ(io->at("fc").count(kOutput), 1u);
  EXPECT_EQ(io->at("fc").count(kInput), 0u);
  EXPECT_EQ(io->at("hidden.0").size(), 2u);

  StageModelConfig wrong;
  ForwardHookConfig* hook = wrong.add_forward_hooks();
  hook->set_module_path("fcc");
  hook->set_requires_output(true);
  ForwardHookManager more;
  EXPECT_THAT(SetHooks(more, **model, wrong),
              StatusIs(absl::StatusCode::kNotFound, AllOf(HasSubstr("forward_hooks[0] (\"fcc\")"),
                                                          HasSubstr("did you mean \"fc\"?"))));
}

std::unique_ptr<Model> Mlp() {
  auto model = MakeRegisteredModel("mlp", {{"in_features", int64_t{4}},
                                           {"hidden", c10::List<int64_t>({3})},
                                           {"num_classes", int64_t{2}}});
  EXPECT_THAT(model, IsOk());
  return *std::move(model);
}

// extract_io_dict: the values recorded since the last pop, on the target
// device; the manager holds nothing after it. clear_io_dict: the values go, the
// hooks stay.
TEST(IoUtilTest, ExtractIoDictPopsOntoTheTargetAndClearKeepsTheHooks) {
  std::unique_ptr<Model> model = Mlp();
  ForwardHookManager hooks;
  ASSERT_THAT(hooks.AddHook(*model, "fc", {.requires_input = false}), IsOk());
  const at::Tensor x = at::randn({5, 4});
  const at::Tensor y = model->Forward({x}).toTensor();
  auto io = ExtractIoDict(hooks, c10::Device(c10::kCPU));
  ASSERT_THAT(io, IsOk());
  EXPECT_TRUE(at::equal(io->at("fc").at(kOutput).toTensor(), y));
  EXPECT_EQ(io->at("fc").at(kOutput).toTensor().device(), c10::Device(c10::kCPU));
  auto again = ExtractIoDict(hooks, c10::Device(c10::kCPU));
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->count("fc") ? again->at("fc").size() : 0u, 0u);

  model->Forward({x});
  hooks.ClearIoDict();
  auto cleared = hooks.PopIoDict();
  ASSERT_THAT(cleared, IsOk());
  EXPECT_EQ(cleared->count("fc") ? cleared->at("fc").size() : 0u, 0u);
  model->Forward({x});
  auto kept = hooks.PopIoDict();
  ASSERT_THAT(kept, IsOk());
  EXPECT_EQ(kept->at("fc").count(kOutput), 1u);
}

// wrap_model: the model is moved; the wrapper itself is the box's stage's (box_ddp_test).
TEST(IoUtilTest, WrapModelMovesTheModel) {
  std::unique_ptr<Model> model = Mlp();
  StageModelConfig config;
  config.set_wrapper(StageModelConfig::DISTRIBUTED_DATA_PARALLEL);
  EXPECT_THAT(WrapModel(*model, config, c10::Device(c10::kCPU), /*distributed=*/true), IsOk());
  EXPECT_THAT(WrapModel(*model, StageModelConfig(), c10::Device(c10::kCPU), false), IsOk());
  EXPECT_EQ(model->NamedParameters().front().second.device(), c10::Device(c10::kCPU));
}

TEST(IoUtilTest, UpdateIoDictReplacesPerPathAndIoType) {
  IoDict main, update;
  main["a"][kInput] = at::ones({1});
  main["a"][kOutput] = at::ones({1});
  update["a"][kOutput] = at::zeros({1});
  update["b"][kInput] = at::full({1}, 2.0);
  UpdateIoDict(main, update);
  EXPECT_EQ(main.at("a").at(kInput).toTensor().item<double>(), 1.0);
  EXPECT_EQ(main.at("a").at(kOutput).toTensor().item<double>(), 0.0);
  EXPECT_EQ(main.at("b").at(kInput).toTensor().item<double>(), 2.0);
}

}  // namespace
}  // namespace kd
