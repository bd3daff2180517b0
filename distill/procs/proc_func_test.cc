#include "distill/procs/proc_func.h"

#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "testing/status_matchers.h"
#include "distill/procs/testing/fake_training_context.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace kd {
namespace {

using ::kd::test::FakeTrainingContext;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;

// What the test process functions below were called with, one line per call.
std::vector<std::string>& Calls() {
  static auto* calls = new std::vector<std::string>;
  return *calls;
}

// "{a=1, b=x}", sorted by name.
std::string Describe(const Kwargs& kwargs) {
  std::map<std::string, std::string> sorted;
  for (const auto& [name, value] : kwargs) {
    std::ostringstream out;
    out << value;
    sorted[name] = out.str();
  }
  return absl::StrCat("{", absl::StrJoin(sorted, ", ", absl::PairFormatter("=")), "}");
}

absl::Status TestPreEpoch(TrainingContext&, int64_t epoch, const Kwargs& kwargs) {
  Calls().push_back(absl::StrCat("pre_epoch ", epoch, " ", Describe(kwargs)));
  return absl::OkStatus();
}

absl::Status TestPreForward(TrainingContext&, Batch& batch, const Kwargs& kwargs) {
  Calls().push_back(absl::StrCat("pre_forward ", batch.samples.toInt(), " ", Describe(kwargs)));
  batch.samples = batch.samples.toInt() + 1;
  return absl::OkStatus();
}

absl::StatusOr<c10::IValue> TestForward(Model& model, const Batch& batch, const Kwargs& kwargs) {
  Calls().push_back(absl::StrCat("forward ", model.kind(), " ", Describe(kwargs)));
  return model.Forward({batch.samples});
}

absl::Status TestPostForward(TrainingContext&, const at::Tensor& loss, std::optional<double> metric,
                             const Kwargs& kwargs) {
  Calls().push_back(absl::StrCat("post_forward ", loss.item<double>(), " ",
                                 metric ? absl::StrCat(*metric) : "-", " ", Describe(kwargs)));
  return absl::OkStatus();
}

absl::Status TestPostEpoch(TrainingContext&, std::optional<double> metric, const Kwargs& kwargs) {
  Calls().push_back(
      absl::StrCat("post_epoch ", metric ? absl::StrCat(*metric) : "-", " ", Describe(kwargs)));
  return absl::OkStatus();
}

absl::Status Throws(TrainingContext&, Batch&, const Kwargs&) {
  TORCH_CHECK(false, "boom");
  return absl::OkStatus();
}

KD_REGISTER_PROC_FUNC(PreEpochProc, "test_pre_epoch", TestPreEpoch, kAnyKwargs);
KD_REGISTER_PROC_FUNC(PreForwardProc, "test_pre_forward", TestPreForward, kAnyKwargs);
KD_REGISTER_PROC_FUNC(ForwardProc, "test_forward", TestForward, kAnyKwargs);
KD_REGISTER_PROC_FUNC(PostForwardProc, "test_post_forward", TestPostForward, kAnyKwargs);
KD_REGISTER_PROC_FUNC(PostEpochProc, "test_post_epoch", TestPostEpoch, kAnyKwargs);
KD_REGISTER_PROC_FUNC(PreForwardProc, "test_throws", Throws, kAnyKwargs);
KD_REGISTER_PROC_FUNC(PreForwardProc, "test_typed", TestPreForward,
                      {{"factor", KwargType::kNumber, "a number"},
                       {"label", KwargType::kString, "a string"}});

template <typename T>
T ParseText(const std::string& text) {
  T message;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &message)) << text;
  return message;
}

class ProcFuncTest : public ::testing::Test {
 protected:
  void SetUp() override { Calls().clear(); }
};

TEST_F(ProcFuncTest, TorchdistillsKeysAreRegistered) {
  EXPECT_THAT(ProcRegistry<PreEpochProc>().Keys(),
              IsSupersetOf({"default_pre_epoch_process_with_teacher",
                            "default_pre_epoch_process_without_teacher"}));
  EXPECT_THAT(ProcRegistry<PreForwardProc>().Keys(), IsSupersetOf({"default_pre_forward_process"}));
  EXPECT_THAT(
      ProcRegistry<ForwardProc>().Keys(),
      IsSupersetOf({"forward_all", "forward_batch_only", "forward_batch_only_as_kwargs",
                    "forward_batch_target", "forward_batch_supp_dict", "forward_batch4sskd"}));
  EXPECT_THAT(ProcRegistry<PostForwardProc>().Keys(),
              IsSupersetOf({"default_post_forward_process"}));
  EXPECT_THAT(ProcRegistry<PostEpochProc>().Keys(),
              IsSupersetOf({"default_post_epoch_process_with_teacher",
                            "default_post_epoch_process_without_teacher"}));
}

TEST_F(ProcFuncTest, RegistriesAreListedByKind) {
  for (const char* kind : {"pre_epoch_proc", "pre_forward_proc", "forward_proc",
                           "post_forward_proc", "post_epoch_proc"}) {
    SCOPED_TRACE(kind);
    const RegistryBase* registry = FindRegistry(kind);
    ASSERT_NE(registry, nullptr);
    EXPECT_EQ(registry->kind(), kind);
  }
}

TEST_F(ProcFuncTest, RoundTripThroughEachRegistry) {
  FakeTrainingContext box(/*with_teacher=*/true);
  Batch batch{c10::IValue(int64_t{7}), c10::IValue(), c10::IValue()};

  auto pre_epoch = BuildProcFunc<PreEpochProc>("test_pre_epoch");
  ASSERT_THAT(pre_epoch, IsOk());
  EXPECT_EQ(pre_epoch->key(), "test_pre_epoch");
  EXPECT_THAT((*pre_epoch)(box, 3), IsOk());

  auto pre_forward = BuildProcFunc<PreForwardProc>("test_pre_forward");
  ASSERT_THAT(pre_forward, IsOk());
  EXPECT_THAT((*pre_forward)(box, batch), IsOk());
  EXPECT_EQ(batch.samples.toInt(), 8);  // the batch is the caller's, changed in place

  auto forward = BuildProcFunc<ForwardProc>("test_forward");
  ASSERT_THAT(forward, IsOk());
  EXPECT_THAT((*forward)(box.student, batch), IsOkAndHolds(c10::IValue(int64_t{1})));
  ASSERT_EQ(box.student.calls.size(), 1u);
  EXPECT_EQ(box.student.calls[0].args[0].toInt(), 8);

  auto post_forward = BuildProcFunc<PostForwardProc>("test_post_forward");
  ASSERT_THAT(post_forward, IsOk());
  EXPECT_THAT((*post_forward)(box, at::full({}, 0.5), 0.25), IsOk());

  auto post_epoch = BuildProcFunc<PostEpochProc>("test_post_epoch");
  ASSERT_THAT(post_epoch, IsOk());
  EXPECT_THAT((*post_epoch)(box, std::nullopt), IsOk());

  EXPECT_THAT(Calls(), ElementsAre("pre_epoch 3 {}", "pre_forward 7 {}", "forward fake {}",
                                   "post_forward 0.5 0.25 {}", "post_epoch - {}"));
}

TEST_F(ProcFuncTest, ConfigKwargsAreDefaultsAndCallKwargsWin) {
  FakeTrainingContext box(/*with_teacher=*/false);
  Batch batch{c10::IValue(int64_t{1}), c10::IValue(), c10::IValue()};
  auto config = ParseText<PluginConfig>(R"pb(
    key: "test_pre_forward"
    kwargs { name: "a" integer: 1 }
    kwargs { name: "b" str: "config" }
  )pb");
  auto proc = BuildProcFunc<PreForwardProc>(config);
  ASSERT_THAT(proc, IsOk());
  EXPECT_EQ(proc->kwargs().size(), 2u);
  EXPECT_THAT((*proc)(box, batch), IsOk());
  EXPECT_THAT((*proc)(box, batch, {{"b", std::string("call")}, {"c", 3.5}}), IsOk());
  EXPECT_THAT((*proc)(box, batch, {{"a", int64_t{2}}}), IsOk());
  EXPECT_THAT(Calls(),
              ElementsAre("pre_forward 1 {a=1, b=config}", "pre_forward 2 {a=1, b=call, c=3.5}",
                          "pre_forward 3 {a=2, b=config}"));

  // Defaults given in C++ behave the same; without defaults the call's kwargs pass through.
  Calls().clear();
  auto direct = BuildProcFunc<PostEpochProc>("test_post_epoch", {{"a", int64_t{1}}});
  ASSERT_THAT(direct, IsOk());
  EXPECT_THAT((*direct)(box, 0.5, {{"a", int64_t{9}}}), IsOk());
  auto bare = BuildProcFunc<PostEpochProc>("test_post_epoch");
  ASSERT_THAT(bare, IsOk());
  EXPECT_THAT((*bare)(box, 0.5, {{"z", true}}), IsOk());
  EXPECT_THAT(Calls(), ElementsAre("post_epoch 0.5 {a=9}", "post_epoch 0.5 {z=True}"));
}

TEST_F(ProcFuncTest, DeclaredKwargsAreCheckedAndConverted) {
  FakeTrainingContext box(/*with_teacher=*/false);
  Batch batch{c10::IValue(int64_t{1}), c10::IValue(), c10::IValue()};
  // An integer where a number is declared arrives as a double.
  auto proc = BuildProcFunc<PreForwardProc>(ParseText<PluginConfig>(R"pb(
    key: "test_typed"
    kwargs { name: "factor" integer: 2 }
  )pb"));
  ASSERT_THAT(proc, IsOk());
  EXPECT_TRUE(proc->kwargs().at("factor").isDouble());
  EXPECT_THAT((*proc)(box, batch), IsOk());
  EXPECT_THAT(Calls(), ElementsAre("pre_forward 1 {factor=2.}"));

  EXPECT_THAT(BuildProcFunc<PreForwardProc>(ParseText<PluginConfig>(R"pb(
                key: "test_typed"
                kwargs { name: "facter" number: 2 }
                kwargs { name: "label" integer: 3 }
              )pb")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "unknown kwarg \"facter\" for pre_forward_proc \"test_typed\"; did you "
                       "mean \"factor\"?; kwarg \"label\" for pre_forward_proc \"test_typed\" "
                       "must be a string, not an integer"));
  EXPECT_THAT(BuildProcFunc<PreForwardProc>("test_typed", {{"scale", 1.0}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "unknown kwarg \"scale\" for pre_forward_proc \"test_typed\"; valid: "
                       "factor, label"));
  // torchdistill's forward processes other than forward_all take no kwargs.
  EXPECT_THAT(BuildProcFunc<ForwardProc>(ParseText<PluginConfig>(R"pb(
                key: "forward_batch_only"
                kwargs { name: "scale" number: 2 }
              )pb")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "unknown kwarg \"scale\" for forward_proc \"forward_batch_only\"; there "
                       "are none"));
  EXPECT_THAT(BuildProcFunc<ForwardProc>(ParseText<PluginConfig>(R"pb(
                key: "forward_all"
                kwargs { name: "scale" number: 2 }
              )pb")),
              IsOk());
}

TEST_F(ProcFuncTest, UnknownKeyNamesNearestAndListsRegisteredKeys) {
  absl::StatusOr<ProcFunc<ForwardProc>> proc = BuildProcFunc<ForwardProc>("forward_batch_onyl");
  EXPECT_THAT(proc, StatusIs(absl::StatusCode::kNotFound,
                             HasSubstr("no forward_proc \"forward_batch_onyl\" is registered; "
                                       "did you mean \"forward_batch_only\"? registered: forward_all, "
                                       "forward_batch4sskd, forward_batch_only, "
                                       "forward_batch_only_as_kwargs, forward_batch_supp_dict, "
                                       "forward_batch_target")));
  EXPECT_THAT(BuildProcFunc<PostEpochProc>(ParseText<PluginConfig>(R"pb(key: "nope")pb")),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("no post_epoch_proc \"nope\" is registered")));
}

// The test reads the deprecated long-name fields on purpose.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST_F(ProcFuncTest, DeprecatedLongNamesMeanTheSame) {
  const auto stage = ParseText<StageConfig>(R"pb(
    pre_forward_process { key: "test_pre_forward" }
    post_epoch_proc { key: "test_post_epoch" }
  )pb");
  EXPECT_THAT(GetProcConfig(stage, "pre_forward_proc"), IsOkAndHolds(&stage.pre_forward_process()));
  EXPECT_THAT(GetProcConfig(stage, "pre_forward_process"),
              IsOkAndHolds(&stage.pre_forward_process()));
  EXPECT_THAT(GetProcConfig(stage, "post_epoch_process"), IsOkAndHolds(&stage.post_epoch_proc()));
  EXPECT_THAT(GetProcConfig(stage, "pre_epoch_proc"), IsOkAndHolds(nullptr));

  auto proc = BuildStageProcFunc<PreForwardProc>(stage, /*with_teacher=*/true);
  ASSERT_THAT(proc, IsOk());
  EXPECT_EQ(proc->key(), "test_pre_forward");

  const auto both = ParseText<StageConfig>(R"pb(
    post_forward_proc { key: "test_post_forward" }
    post_forward_process { key: "test_post_forward" }
  )pb");
  EXPECT_THAT(GetProcConfig(both, "post_forward_proc"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "give \"post_forward_proc\" or its deprecated name "
                       "\"post_forward_process\", not both"));
  EXPECT_THAT(GetProcConfig(stage, "forward_proc"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "\"forward_proc\" is no stage process function; use one of "
                       "pre_epoch_proc, pre_forward_proc, post_forward_proc, post_epoch_proc"));
}
#pragma GCC diagnostic pop

TEST_F(ProcFuncTest, UnsetProcessesAreTorchdistillsDefaults) {
  const StageConfig empty;
  auto key = [&](auto proc) { return proc.ok() ? proc->key() : proc.status().ToString(); };
  EXPECT_EQ(key(BuildStageProcFunc<PreEpochProc>(empty, true)),
            "default_pre_epoch_process_with_teacher");
  EXPECT_EQ(key(BuildStageProcFunc<PreEpochProc>(empty, false)),
            "default_pre_epoch_process_without_teacher");
  EXPECT_EQ(key(BuildStageProcFunc<PreForwardProc>(empty, true)), "default_pre_forward_process");
  EXPECT_EQ(key(BuildStageProcFunc<PostForwardProc>(empty, false)), "default_post_forward_process");
  EXPECT_EQ(key(BuildStageProcFunc<PostEpochProc>(empty, true)),
            "default_post_epoch_process_with_teacher");
  EXPECT_EQ(key(BuildStageProcFunc<PostEpochProc>(empty, false)),
            "default_post_epoch_process_without_teacher");
  EXPECT_EQ(key(BuildForwardProcFunc(StageModelConfig())), "forward_batch_only");
  EXPECT_EQ(key(BuildForwardProcFunc(ParseText<StageModelConfig>(R"pb(forward_proc {
                                                                        key: "forward_batch_target"
                                                                      })pb"))),
            "forward_batch_target");
}

TEST_F(ProcFuncTest, ExceptionsBecomeStatusesNamingTheFunction) {
  FakeTrainingContext box(/*with_teacher=*/false);
  Batch batch;
  auto proc = BuildProcFunc<PreForwardProc>("test_throws");
  ASSERT_THAT(proc, IsOk());
  EXPECT_THAT((*proc)(box, batch), StatusIs(absl::StatusCode::kInternal,
                                            "pre_forward_proc \"test_throws\" failed: boom"));
}

}  // namespace
}  // namespace kd
