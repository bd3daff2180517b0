// Properties of the distillation losses that hold whatever the inputs: known
// identities (DKD's decomposition of KD, the logit-space meaning of the
// Mahalanobis metric), bounds, symmetries, masking; and the state losses own.
// Values against the peers: standard_losses_test.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distill/losses/criterion.h"
#include "distill/losses/loss.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "hooks/torchscript_model.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace {

using ::kd::test::FixturePath;
using ::kd::test::IValueNear;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::unique_ptr<Loss> Make(const std::string& key, const Kwargs& kwargs = {}) {
  absl::StatusOr<std::unique_ptr<Loss>> loss = MakeLoss(key, kwargs);
  EXPECT_THAT(loss, IsOk()) << key;
  return loss.ok() ? *std::move(loss) : nullptr;
}

double Value(Loss& loss, const LossInputs& inputs) {
  absl::StatusOr<at::Tensor> value = loss.Forward(inputs);
  EXPECT_THAT(value, IsOk());
  return value.ok() ? value->item<double>() : NAN;
}

// DKD's founding identity (Zhao et al. 2022, Eq. 1): per sample,
//   KL(p_t || p_s) = TCKD + (1 - p_t[target]) * NCKD,
// with TCKD = DKD(alpha 1, beta 0) and NCKD = DKD(alpha 0, beta 1) (both times
// T^2).
TEST(KdMethodsTest, DkdDecomposesKd) {
  const double t = 3.0;
  for (int64_t target : {0, 4}) {
    const at::Tensor s = at::randn({1, 6}), te = at::randn({1, 6});
    const at::Tensor y = at::tensor({target});
    const LossInputs in{{"student", s}, {"teacher", te}, {"targets", y}};
    const double tckd = Value(
        *Make("DKDLoss", {{"alpha", 1.0}, {"beta", 0.0}, {"temperature", t}}),
        in);
    const double nckd = Value(
        *Make("DKDLoss", {{"alpha", 0.0}, {"beta", 1.0}, {"temperature", t}}),
        in);
    const double kl = Value(*Make("KDLoss", {{"temperature", t}}), in) * t * t;
    const double pt_target = at::softmax(te / t, 1)[0][target].item<double>();
    EXPECT_NEAR(kl, tckd + (1 - pt_target) * nckd, 1e-5 * std::max(1.0, kl));
  }
  EXPECT_NEAR(Value(*Make("DKDLoss"), {{"student", at::ones({2, 3})},
                                       {"teacher", at::ones({2, 3})},
                                       {"targets", at::tensor({0, 2})}}),
              0.0, 1e-6);
  EXPECT_THAT(Make("DKDLoss")->Forward({{"student", at::randn({2, 3})},
                                        {"teacher", at::randn({2, 3})},
                                        {"targets", at::randn({2})}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("needs logits (N, C) and class indices (N)")));
}

const std::vector<std::string> kSequenceKeys = {
    "forward_kl",      "reverse_kl",      "generalized_jsd",
    "total_variation", "skew_forward_kl", "skew_reverse_kl"};

TEST(KdMethodsTest, SequenceDivergencesVanishOnEqualLogitsAndTvdIsBounded) {
  const at::Tensor logits = at::randn({2, 5, 9}) * 3;
  for (const std::string& key : kSequenceKeys) {
    EXPECT_NEAR(Value(*Make(key), {{"student", logits}, {"teacher", logits}}),
                0.0, 1e-6)
        << key;
  }
  // Disjoint, peaked distributions: TVD reaches (not passes) 1; any pair stays
  // in [0, 1].
  const at::Tensor a = at::full({1, 1, 4}, -1e4).index_put_({0, 0, 0}, 0.0);
  const at::Tensor b = at::full({1, 1, 4}, -1e4).index_put_({0, 0, 3}, 0.0);
  auto tvd = Make("total_variation");
  EXPECT_NEAR(Value(*tvd, {{"student", a}, {"teacher", b}}), 1.0, 1e-6);
  for (int i = 0; i < 20; ++i) {
    const double v = Value(*tvd, {{"student", at::randn({3, 4, 8}) * 10},
                                  {"teacher", at::randn({3, 4, 8}) * 10}});
    EXPECT_GE(v, 0.0);
    EXPECT_LE(v, 1.0);
  }
}

TEST(KdMethodsTest, JsdIsSymmetricAtOneHalfAndSkewZeroIsPlainKl) {
  const at::Tensor a = at::randn({2, 3, 7}), b = at::randn({2, 3, 7});
  auto half = Make("generalized_jsd", {{"beta", 0.5}});
  EXPECT_NEAR(Value(*half, {{"student", a}, {"teacher", b}}),
              Value(*half, {{"student", b}, {"teacher", a}}), 1e-6);
  auto skew = Make("generalized_jsd", {{"beta", 0.2}});
  EXPECT_GT(std::abs(Value(*skew, {{"student", a}, {"teacher", b}}) -
                     Value(*skew, {{"student", b}, {"teacher", a}})),
            1e-4);
  const LossInputs in{{"student", a}, {"teacher", b}};
  EXPECT_NEAR(Value(*Make("skew_forward_kl", {{"alpha", 0.0}}), in),
              Value(*Make("forward_kl"), in), 1e-6);
  EXPECT_NEAR(Value(*Make("skew_reverse_kl", {{"alpha", 0.0}}), in),
              Value(*Make("reverse_kl"), in), 1e-6);
  // Reverse KL is forward KL with the roles swapped.
  EXPECT_NEAR(Value(*Make("reverse_kl"), in),
              Value(*Make("forward_kl"), {{"student", b}, {"teacher", a}}),
              1e-6);
}

// Ignored positions change nothing and get no gradient; a fully ignored batch
// gives 0, not NaN; sequence_mean weighs sequences equally, token_mean tokens.
TEST(KdMethodsTest, SequenceMaskingAndReductions) {
  const at::Tensor s = at::randn({2, 3, 5}), t = at::randn({2, 3, 5});
  const at::Tensor labels = at::tensor({1, -100, -100, 2, 3, 4}).view({2, 3});
  for (const std::string& key : kSequenceKeys) {
    SCOPED_TRACE(key);
    auto loss = Make(key);
    const at::Tensor s1 = s.clone().requires_grad_(true);
    absl::StatusOr<at::Tensor> v1 =
        loss->Forward({{"student", s1}, {"teacher", t}, {"labels", labels}});
    ASSERT_THAT(v1, IsOk());
    v1->backward();
    EXPECT_EQ(s1.grad()[0][1].abs().sum().item<double>(), 0.0);
    EXPECT_GT(s1.grad()[0][0].abs().sum().item<double>(), 0.0);
    at::Tensor changed = s.clone();
    changed[0][2] += 5.0;  // an ignored position
    EXPECT_NEAR(
        Value(*loss,
              {{"student", changed}, {"teacher", t}, {"labels", labels}}),
        v1->item<double>(), 1e-6);
    const at::Tensor s2 = s.clone().requires_grad_(true);
    absl::StatusOr<at::Tensor> none = loss->Forward(
        {{"student", s2}, {"teacher", t}, {"labels", at::full({2, 3}, -100)}});
    ASSERT_THAT(none, IsOk());
    none->backward();
    EXPECT_EQ(none->item<double>(), 0.0);
    EXPECT_FALSE(s2.grad().isnan().any().item<bool>());
  }
  auto per_token = Make("forward_kl", {{"reduction", std::string("none")}});
  const at::Tensor d =
      *per_token->Forward({{"student", s}, {"teacher", t}, {"labels", labels}});
  ASSERT_EQ(d.sizes(), (std::vector<int64_t>{2, 3}));
  const double d00 = d[0][0].item<double>();
  const double row1 = d[1].sum().item<double>();
  EXPECT_NEAR(Value(*Make("forward_kl"),
                    {{"student", s}, {"teacher", t}, {"labels", labels}}),
              (d00 + row1) / 4, 1e-6);
  EXPECT_NEAR(
      Value(*Make("forward_kl", {{"reduction", std::string("sequence_mean")}}),
            {{"student", s}, {"teacher", t}, {"labels", labels}}),
      (d00 + row1 / 3) / 2, 1e-6);
  EXPECT_THAT(
      Make("forward_kl")
          ->Forward({{"student", s},
                     {"teacher", t},
                     {"labels", at::zeros({2, 4}, at::kLong)}}),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "labels must be integers shaped like the logits without their "
              "vocabulary dimension, [2, 3]; got [2, 4]")));
}

// The Mahalanobis metric M = W^T W makes the hidden-state distance the
// logit-space one: (s - t)^T M (s - t) = ||W s - W t||^2. M follows W when W
// changes in place. (M is computed in float32, as silverspoon-kd computes it:
// relative tolerance 1e-6.)
TEST(KdMethodsTest, MahalanobisIsTheLogitSpaceDistance) {
  const at::Tensor s = at::randn({4, 6}, at::kDouble),
                   t = at::randn({4, 6}, at::kDouble);
  at::Tensor w = at::randn({9, 6}, at::kDouble);
  auto mse = Make("mahalanobis_mse");
  auto logit_distance = [&] {
    return (at::matmul(s, w.t()) - at::matmul(t, w.t()))
        .pow(2)
        .sum(-1)
        .mean()
        .item<double>();
  };
  EXPECT_NEAR(
      Value(*mse, {{"student", s}, {"teacher", t}, {"weight_matrix", w}}),
      logit_distance(), 1e-6 * logit_distance());
  w.mul_(
      2.0);  // an optimizer step on the head: the cached metric is recomputed
  EXPECT_NEAR(
      Value(*mse, {{"student", s}, {"teacher", t}, {"weight_matrix", w}}),
      logit_distance(), 1e-6 * logit_distance());
  const at::Tensor ws = at::matmul(s, w.t()), wt = at::matmul(t, w.t());
  EXPECT_NEAR(Value(*Make("mahal_cosine"),
                    {{"student", s}, {"teacher", t}, {"weight_matrix", w}}),
              (1 - at::cosine_similarity(ws, wt, -1)).mean().item<double>(),
              1e-6);
  EXPECT_THAT(
      mse->Forward({{"student", s}, {"teacher", t}}),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "needs exactly one of the inputs \"weight_matrix\" (V, D) and "
              "\"metric_matrix\" (D, D); neither given")));
}

TEST(KdMethodsTest, RelationLossesVanishOnEqualInputsAndIgnoreScale) {
  const at::Tensor f = at::randn({5, 3, 4, 4});
  for (const std::string key :
       {"SPKDLoss", "CCKDLoss", "relkd_distance", "relkd_angle", "relkd_da",
        "angular_magnitude", "contrastive"}) {
    const at::Tensor x = key == "CCKDLoss" || key == "angular_magnitude"
                             ? f.flatten(1) * 0.1
                             : f;
    const double v = Value(*Make(key), {{"student", x}, {"teacher", x}});
    if (key == "contrastive") {
      // InfoNCE is not 0 at equality, but equal inputs are its best case among
      // shuffles.
      EXPECT_LT(v,
                Value(*Make(key), {{"student", x}, {"teacher", x.roll(1, 0)}}))
          << key;
    } else {
      EXPECT_NEAR(v, 0.0, 1e-6) << key;
    }
  }
  // Distances are divided by their mean, angles are scale-free.
  for (const std::string key : {"relkd_distance", "relkd_angle"}) {
    EXPECT_NEAR(Value(*Make(key), {{"student", f * 7.0}, {"teacher", f}}), 0.0,
                1e-6)
        << key;
  }
  EXPECT_THAT(
      Make("FSPLoss")->Forward({{"student_first", at::randn({2, 3, 4, 4})},
                                {"student_second", at::randn({2, 5, 4, 4})},
                                {"teacher_first", at::randn({2, 3, 4, 4})},
                                {"teacher_second", at::randn({2, 6, 4, 4})}}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("the student's FSP matrices [2, 3, 5] differ from the "
                         "teacher's [2, 3, 6]")));
}

// CRD's memory bank: each call moves the batch's rows (and only those) toward
// the embeddings, keeping them unit vectors; the normalization constants are
// set once; negatives are drawn when none are given.
TEST(KdMethodsTest, CrdUpdatesItsMemoryBankRowsOfTheBatch) {
  auto crd = Make("CRDLoss", {{"input_size", int64_t{4}},
                              {"output_size", int64_t{10}},
                              {"num_negative_samples", int64_t{3}},
                              {"num_samples", int64_t{10}}});
  std::map<std::string, at::Tensor> state;
  for (const auto& [name, tensor] : crd->NamedState())
    state.emplace(name, tensor);
  ASSERT_EQ(state.size(), 3u);
  const at::Tensor before = state.at("memory_v1").clone();
  const at::Tensor s = L2Normalize(at::randn({2, 4}), 1),
                   t = L2Normalize(at::randn({2, 4}), 1);
  const at::Tensor pos = at::tensor({2, 7});
  EXPECT_TRUE(std::isfinite(
      Value(*crd, {{"student", s}, {"teacher", t}, {"pos_idx", pos}})));
  for (const auto& [name, tensor] : crd->NamedState()) state[name] = tensor;
  const at::Tensor after = state.at("memory_v1");
  const at::Tensor changed = (after - before).abs().sum(1) > 0;
  EXPECT_THAT(c10::IValue(changed.nonzero().flatten()),
              IValueNear(c10::IValue(pos), 0));
  EXPECT_THAT(c10::IValue(after.index_select(0, pos).norm(2, 1)),
              IValueNear(c10::IValue(at::ones({2})), 1e-6));
  const double z = state.at("params")[2].item<double>();
  EXPECT_GT(z, 0);
  Value(*crd, {{"student", s}, {"teacher", t}, {"pos_idx", pos}});
  for (const auto& [name, tensor] : crd->NamedState()) state[name] = tensor;
  EXPECT_EQ(state.at("params")[2].item<double>(), z);
  EXPECT_THAT(
      crd->Forward(
          {{"student", s}, {"teacher", t}, {"pos_idx", at::tensor({1})}}),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "needs student and teacher embeddings (B, 4), pos_idx (B)")));
}

// A projector made on the first call when the dimensions were not given; up
// front when they were (so the optimizer sees it), refusing inputs of other
// dimensions.
TEST(KdMethodsTest, ContrastiveOwnsItsProjector) {
  auto lazy = Make("contrastive");
  EXPECT_TRUE(lazy->Parameters().empty());
  Value(*lazy,
        {{"student", at::randn({4, 5})}, {"teacher", at::randn({4, 8})}});
  ASSERT_EQ(lazy->Parameters().size(), 2u);
  EXPECT_EQ(lazy->Parameters()[0].sizes(), (std::vector<int64_t>{8, 5}));
  auto eager = Make("contrastive",
                    {{"student_dim", int64_t{5}}, {"teacher_dim", int64_t{8}}});
  EXPECT_EQ(eager->NamedState().size(), 2u);
  EXPECT_THAT(eager->Forward({{"student", at::randn({4, 6})},
                              {"teacher", at::randn({4, 8})}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("of 5 and 8 features")));
  EXPECT_THAT(MakeLoss("contrastive", {{"student_dim", int64_t{5}}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("give student_dim and teacher_dim together")));
}

// Kwargs built in code get the checks a config gets: type, range, finiteness,
// required.
TEST(KdMethodsTest, ProgrammaticKwargsAreChecked) {
  EXPECT_THAT(
      MakeLoss("KDLoss", {{"temperature", NAN}}),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "kwarg \"temperature\" for loss \"KDLoss\" must be finite")));
  EXPECT_THAT(MakeLoss("generalized_jsd", {{"beta", 1.0}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("must be in (0, 1), got 1")));
  EXPECT_THAT(
      MakeLoss("forward_kl", {{"reduction", std::string("tokens")}}),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr(
              "kwarg \"reduction\" for loss \"forward_kl\" is \"tokens\"; ")));
  EXPECT_THAT(
      MakeLoss("FitNetLoss", {{"student_channels", 3.5}}),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          AllOf(HasSubstr(
                    "\"student_channels\" for loss \"FitNetLoss\" must be an "
                    "integer, not a number"),
                HasSubstr("missing required kwarg \"teacher_channels\""))));
}

// A term may read a model's parameters (io: PARAMETER): here logit_lens_kl
// through the teacher's classifier; an unknown name is refused with the nearest
// ones.
TEST(KdMethodsTest, CriterionReadsModelParameters) {
  auto teacher = LoadTorchScriptModel(FixturePath("small_cnn.pt"));
  ASSERT_THAT(teacher, IsOk());
  CriterionConfig config;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        terms {
          key: "logit_lens_kl"
          inputs { arg: "student" source: STUDENT path: "pool" }
          inputs { arg: "teacher" source: TEACHER path: "pool" }
          inputs {
            arg: "head_weight"
            source: TEACHER
            path: "fc.weight"
            io: PARAMETER
          }
          inputs {
            arg: "head_bias"
            source: TEACHER
            path: "fc.bias"
            io: PARAMETER
          }
        }
      )pb",
      &config));
  auto criterion = Criterion::FromConfig(config);
  ASSERT_THAT(criterion, IsOk());
  std::map<std::string, at::Tensor> params;
  for (const auto& [name, tensor] : (*teacher)->NamedParameters())
    params.emplace(name, tensor);
  const int64_t features = params.at("fc.weight").size(1);
  IoDict s_io, t_io;
  s_io["pool"][kOutput] = at::randn({3, features});
  t_io["pool"][kOutput] = at::randn({3, features});
  auto result = criterion->Forward({.student_io = &s_io,
                                    .teacher_io = &t_io,
                                    .teacher_model = teacher->get()});
  ASSERT_THAT(result, IsOk());
  const at::Tensor expected =
      *Make("logit_lens_kl")
           ->Forward({{"student", s_io["pool"][kOutput].toTensor()},
                      {"teacher", t_io["pool"][kOutput].toTensor()},
                      {"head_weight", params.at("fc.weight")},
                      {"head_bias", params.at("fc.bias")}});
  EXPECT_THAT(c10::IValue(result->total),
              IValueNear(c10::IValue(expected), 1e-6));

  config.mutable_terms(0)->mutable_inputs(2)->set_path("fc.weights");
  auto wrong = Criterion::FromConfig(config);
  ASSERT_THAT(wrong, IsOk());
  EXPECT_THAT(
      wrong->Forward({.student_io = &s_io,
                      .teacher_io = &t_io,
                      .teacher_model = teacher->get()}),
      StatusIs(
          absl::StatusCode::kNotFound,
          HasSubstr("teacher parameter \"fc.weights\": the teacher has no such "
                    "parameter or buffer; did you mean \"fc.weight\"?")));
}

}  // namespace
}  // namespace kd
