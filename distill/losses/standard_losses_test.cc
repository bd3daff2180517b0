#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "distill/losses/criterion.h"
#include "distill/losses/loss.h"
#include "google/protobuf/text_format.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace {

using ::kd::test::At;
using ::kd::test::IValueNear;
using ::kd::test::LoadExpected;
using ::testing::HasSubstr;

// Relative tolerance 1e-5 (plus 1e-6 absolute for values near 0): atol for `expected`.
double Tolerance(const c10::IValue& expected) {
  const double scale = expected.isTensor() ? expected.toTensor().abs().max().item<double>() : 0;
  return 1e-6 + 1e-5 * scale;
}

// Every case recorded from the peers' own classes (tests/testdata/make_loss_fixtures.py:
// torch.nn's losses, torchdistill's and silverspoon-kd's; the paper formulas of DKD and the
// sequence divergences): the value, the gradient of each input and what the loss owns after.
// A kwarg as a config gives it: Python's list of numbers (unpickled as a list of any) as a
// list of doubles, or of integers when every element is one.
c10::IValue AsConfigValue(const c10::IValue& value) {
  if (!value.isList() || value.isIntList() || value.isDoubleList()) return value;
  bool ints = true;
  std::vector<double> numbers;
  for (const c10::IValue& v : value.toListRef()) {
    if (!v.isDouble() && !v.isInt()) return value;
    ints = ints && v.isInt();
    numbers.push_back(v.isInt() ? static_cast<double>(v.toInt()) : v.toDouble());
  }
  if (!ints) return c10::IValue(numbers);
  std::vector<int64_t> integers(numbers.begin(), numbers.end());
  return c10::IValue(integers);
}

TEST(StandardLossesTest, ValuesAndGradientsEqualThePeers) {
  const c10::IValue cases = LoadExpected("losses");
  std::set<std::string> keys;
  for (const c10::IValue& c : cases.toTupleRef().elements()) {
    const std::string key = At(c, "key").toStringRef();
    keys.insert(key);
    Kwargs kwargs;
    for (const auto& entry : At(c, "kwargs").toGenericDict()) {
      kwargs.emplace(entry.key().toStringRef(), AsConfigValue(entry.value()));
    }
    SCOPED_TRACE(key);
    auto loss = MakeLoss(key, kwargs);
    ASSERT_THAT(loss, IsOk());
    // What the peer's loss owned at the start (a projector, a memory bank), loaded by name.
    std::map<std::string, at::Tensor> state;
    for (const auto& [name, tensor] : (*loss)->NamedState()) state.emplace(name, tensor);
    for (const auto& entry : At(c, "state").toGenericDict()) {
      auto it = state.find(entry.key().toStringRef());
      ASSERT_NE(it, state.end()) << entry.key().toStringRef();
      at::NoGradGuard no_grad;
      it->second.copy_(entry.value().toTensor());
    }
    std::map<std::string, at::Tensor> inputs;
    for (const auto& entry : At(c, "inputs").toGenericDict()) {
      at::Tensor t = entry.value().toTensor().clone();
      // Inputs Python gave without gradient (a target torch cannot differentiate) stay so.
      if (t.is_floating_point() && At(c, "grads").toGenericDict().contains(entry.key())) {
        t.requires_grad_(true);
      }
      inputs.emplace(entry.key().toStringRef(), t);
    }
    auto value = (*loss)->Forward(LossInputs(inputs));
    ASSERT_THAT(value, IsOk());
    const c10::IValue expected = At(c, "value");
    EXPECT_THAT(c10::IValue(*value), IValueNear(expected, Tolerance(expected)));
    value->sum().backward();
    for (const auto& entry : At(c, "grads").toGenericDict()) {
      const std::string& name = entry.key().toStringRef();
      EXPECT_THAT(c10::IValue(inputs.at(name).grad()),
                  IValueNear(entry.value(), Tolerance(entry.value())))
          << name;
    }
    // Read again: a loss may have moved its state to the inputs' device or dtype.
    std::map<std::string, at::Tensor> after;
    for (const auto& [name, tensor] : (*loss)->NamedState()) after.emplace(name, tensor);
    for (const auto& entry : At(c, "state_after").toGenericDict()) {
      const std::string& name = entry.key().toStringRef();
      EXPECT_THAT(c10::IValue(after.at(name)), IValueNear(entry.value(), Tolerance(entry.value())))
          << name;
    }
  }
  // Every torch.nn loss torchdistill 1.1.5 accepts by name (its LOSS_DICT's loss classes, on
  // torch 2.14) is checked against torch's own class.
  for (const char* key :
       {"BCELoss", "BCEWithLogitsLoss", "CTCLoss", "CosineEmbeddingLoss", "CrossEntropyLoss",
        "GaussianNLLLoss", "HingeEmbeddingLoss", "HuberLoss", "KLDivLoss", "L1Loss",
        "LinearCrossEntropyLoss", "MSELoss", "MarginRankingLoss", "MultiLabelMarginLoss",
        "MultiLabelSoftMarginLoss", "MultiMarginLoss", "NLLLoss", "NLLLoss2d", "PoissonNLLLoss",
        "SmoothL1Loss", "SoftMarginLoss", "TripletMarginLoss", "TripletMarginWithDistanceLoss"}) {
    EXPECT_EQ(keys.count(key), 1u) << key;
  }
  // torchdistill's mid-level losses on recorded values, each against its own class.
  for (const char* key : {"FTLoss", "KTALoss", "AltActTransferLoss", "RegularizationLoss",
                          "ChSimLoss", "AffinityLoss", "DISTPlusLoss", "SRDLoss",
                          "HierarchicalContextLoss", "PADL2Loss", "VIDLoss", "SKDDirectionLoss",
                          "SKDInstanceLoss", "SSKDLoss", "AuxSSKDLoss"}) {
    EXPECT_EQ(keys.count(key), 1u) << key;
  }
  // silverspoon-kd's 14 keys and 4 aliases are all checked against it.
  for (const char* key : {"mse", "normalized_mse", "cosine", "smooth_l1", "kl_divergence", "jsd",
                          "logit_lens_kl", "contrastive", "angular_magnitude", "mahalanobis_mse",
                          "mahalanobis_cosine", "relkd_distance", "relkd_angle",
                          "relkd_distance_angle", "kl_div", "mahal_mse", "mahal_cosine",
                          "relkd_da"}) {
    EXPECT_EQ(keys.count(key), 1u) << key;
  }
}

TEST(StandardLossesTest, KdIsZeroForIdenticalLogitsAtAnyTemperature) {
  const at::Tensor logits = at::randn({3, 7});
  for (double t : {0.5, 1.0, 4.0, 20.0}) {
    auto loss = MakeLoss("KDLoss", {{"temperature", t}});
    ASSERT_THAT(loss, IsOk());
    auto value = (*loss)->Forward({{"student", logits}, {"teacher", logits}});
    ASSERT_THAT(value, IsOk());
    EXPECT_NEAR(value->item<double>(), 0.0, 1e-7) << t;
  }
}

// Relation and feature losses vanish when the student equals the teacher; RKD's distance term
// ignores the scale of the embedding (it divides by the mean distance).
TEST(StandardLossesTest, FeatureLossesVanishOnEqualInputs) {
  const at::Tensor f = at::randn({4, 3, 5, 5});
  for (const auto& [key, kwargs] :
       std::vector<std::pair<std::string, Kwargs>>{
           {"ATLoss", {}},
           {"ATLoss", {{"mode", std::string("paper")}}},
           {"PKTLoss", {}},
           {"DISTLoss", {}},
           {"RKDLoss",
            {{"dist_factor", 1.0}, {"angle_factor", 2.0}, {"reduction", std::string("mean")}}}}) {
    auto loss = MakeLoss(key, kwargs);
    ASSERT_THAT(loss, IsOk()) << key;
    const at::Tensor s = key == "PKTLoss" || key == "DISTLoss" ? f.flatten(1) : f;
    auto value = (*loss)->Forward({{"student", s}, {"teacher", s}});
    ASSERT_THAT(value, IsOk()) << key;
    EXPECT_NEAR(value->item<double>(), 0.0, 1e-6) << key;
  }
  auto rkd = MakeLoss("RKDLoss", {{"dist_factor", 1.0}, {"angle_factor", 0.0},
                                  {"reduction", std::string("mean")}});
  ASSERT_THAT(rkd, IsOk());
  auto scaled = (*rkd)->Forward({{"student", f * 3.0}, {"teacher", f}});
  ASSERT_THAT(scaled, IsOk());
  EXPECT_NEAR(scaled->item<double>(), 0.0, 1e-6);
}

CriterionConfig ParseCriterion(const std::string& text) {
  CriterionConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config)) << text;
  return config;
}

// mdistiller's DKD warm-up as a term option: weight * min(epoch / warmup_epochs, 1), epochs from
// 1; a term without it keeps its weight.
TEST(CriterionTest, AWarmUpRampsATermsWeightOverItsEpochs) {
  auto criterion = Criterion::FromConfig(ParseCriterion(R"pb(
    terms {
      name: "dkd"
      key: "DKDLoss"
      weight: 2
      warmup_epochs: 4
      inputs { arg: "student" source: STUDENT }
      inputs { arg: "teacher" source: TEACHER }
      inputs { arg: "targets" source: TARGETS }
    }
    terms {
      key: "CrossEntropyLoss"
      inputs { arg: "input" source: STUDENT }
      inputs { arg: "target" source: TARGETS }
    }
  )pb"));
  ASSERT_THAT(criterion, IsOk());
  at::Generator generator = at::detail::createCPUGenerator(3);
  const at::Tensor s = at::randn({4, 5}, generator), t = at::randn({4, 5}, generator);
  const at::Tensor targets = at::tensor({0, 1, 2, 3}, at::kLong);
  const double dkd = (*(*MakeLoss("DKDLoss", {}))->Forward(
                         {{"student", s}, {"teacher", t}, {"targets", targets}}))
                         .item<double>();
  const double ce = at::cross_entropy_loss(s, targets).item<double>();
  for (const auto& [epoch, factor] :
       std::vector<std::pair<int64_t, double>>{{0, 0.25}, {1, 0.5}, {3, 1.0}, {9, 1.0}}) {
    auto result = criterion->Forward(
        {.student_output = s, .teacher_output = t, .targets = targets, .epoch = epoch});
    ASSERT_THAT(result, IsOk());
    EXPECT_DOUBLE_EQ(result->terms[0].weight, 2 * factor) << epoch;
    EXPECT_EQ(result->terms[1].weight, 1.0);
    EXPECT_NEAR(result->total.item<double>(), 2 * factor * dkd + ce, 1e-5) << epoch;
  }
}

// A BATCH input reads the batch's supplementary dict by key (CRD's pos_idx from "indices"); a
// key the batch lacks is named with those it has.
TEST(CriterionTest, BatchInputsReadTheSupplementaryDict) {
  auto criterion = Criterion::FromConfig(ParseCriterion(R"pb(
    terms {
      key: "MSELoss"
      inputs { arg: "input" source: STUDENT }
      inputs { arg: "target" source: BATCH path: "soft" }
    }
  )pb"));
  ASSERT_THAT(criterion, IsOk());
  const at::Tensor s = at::tensor({1.0, 2.0}), soft = at::tensor({0.0, 4.0});
  c10::Dict<std::string, at::Tensor> supp;
  supp.insert("indices", at::tensor({3, 7}, at::kLong));
  supp.insert("soft", soft);
  auto result = criterion->Forward({.student_output = s, .supp = supp});
  ASSERT_THAT(result, IsOk());
  EXPECT_DOUBLE_EQ(result->total.item<double>(), (1.0 + 4.0) / 2);
  c10::Dict<std::string, at::Tensor> other;
  other.insert("indices", at::tensor({3, 7}, at::kLong));
  EXPECT_THAT(criterion->Forward({.student_output = s, .supp = other}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch supp[\"soft\"]: the batch has no such tensor; it has "
                                 "\"indices\"")));
}

// The weighted sum of a config's terms, each reading I/O references, equals the same losses
// computed by hand; each term's unweighted value is reported.
TEST(CriterionTest, WeightedSumOfTermsReadingIoReferences) {
  auto criterion = Criterion::FromConfig(ParseCriterion(R"pb(
    terms {
      name: "kd"
      key: "KDLoss"
      kwargs { name: "temperature" number: 4 }
      kwargs { name: "alpha" number: 0.5 }
      inputs { arg: "student" source: STUDENT }
      inputs { arg: "teacher" source: TEACHER }
      inputs { arg: "targets" source: TARGETS }
    }
    terms {
      name: "hint"
      key: "MSELoss"
      weight: 0.25
      inputs { arg: "student" source: STUDENT path: "connector" }
      inputs { arg: "teacher" source: TEACHER path: "layer2" io: INPUT }
    }
  )pb"));
  ASSERT_THAT(criterion, IsOk());
  const at::Tensor s_out = at::randn({4, 5}), t_out = at::randn({4, 5});
  const at::Tensor targets = at::tensor({0, 1, 2, 3}, at::kLong);
  IoDict s_io, t_io;
  s_io["connector"][kOutput] = at::randn({4, 8});
  t_io["layer2"][kInput] = at::randn({4, 8});
  auto result = criterion->Forward({.student_io = &s_io, .teacher_io = &t_io,
                                    .student_output = s_out, .teacher_output = t_out,
                                    .targets = targets});
  ASSERT_THAT(result, IsOk());
  auto kd = MakeLoss("KDLoss", {{"temperature", 4.0}, {"alpha", 0.5}});
  const at::Tensor kd_value =
      *(*kd)->Forward({{"student", s_out}, {"teacher", t_out}, {"targets", targets}});
  const at::Tensor hint_value =
      at::mse_loss(s_io["connector"][kOutput].toTensor(), t_io["layer2"][kInput].toTensor());
  ASSERT_EQ(result->terms.size(), 2u);
  EXPECT_EQ(result->terms[1].name, "hint");
  EXPECT_EQ(result->terms[1].weight, 0.25);
  EXPECT_THAT(c10::IValue(result->terms[0].value), IValueNear(kd_value, 1e-6));
  EXPECT_THAT(c10::IValue(result->total), IValueNear(kd_value + 0.25 * hint_value, 1e-6));

  // A reference nothing recorded, and shapes a loss refuses, name the term and the references.
  IoDict empty;
  EXPECT_THAT(criterion->Forward({.student_io = &empty, .teacher_io = &t_io,
                                  .student_output = s_out, .teacher_output = t_out,
                                  .targets = targets}),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("loss term \"hint\": no I/O recorded for module \"connector\"")));
  s_io["connector"][kOutput] = at::randn({4, 7});
  EXPECT_THAT(criterion->Forward({.student_io = &s_io, .teacher_io = &t_io,
                                  .student_output = s_out, .teacher_output = t_out,
                                  .targets = targets}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("loss term \"hint\": loss \"MSELoss\": student has shape "
                                 "[4, 7] but teacher has [4, 8] (inputs: student = student "
                                 "io[\"connector\"][\"output\"] [4, 7] Float, teacher = teacher "
                                 "io[\"layer2\"][\"input\"] [4, 8] Float)")));
  // Kwargs break the contract: named with the term.
  EXPECT_THAT(Criterion::FromConfig(ParseCriterion(R"pb(
                terms { name: "kd" key: "KDLoss" kwargs { name: "temperature" number: -1 } }
              )pb")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("loss term \"kd\": kwarg \"temperature\" for loss \"KDLoss\" "
                                 "must be in (0, inf], got -1")));
}

// FitNet's regressor is the loss's own: its parameters get gradients, and a few SGD steps on
// them alone fit a student feature map to a teacher one that is a 1x1 map of it.
TEST(StandardLossesTest, FitNetOwnsATrainableRegressor) {
  auto loss = MakeLoss("FitNetLoss", {{"student_channels", int64_t{3}},
                                      {"teacher_channels", int64_t{5}}});
  ASSERT_THAT(loss, IsOk());
  const std::vector<at::Tensor> params = (*loss)->Parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].sizes(), (std::vector<int64_t>{5, 3, 1, 1}));
  const at::Tensor s = at::randn({8, 3, 4, 4});
  const at::Tensor t = at::conv2d(s, at::randn({5, 3, 1, 1}));
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    auto value = (*loss)->Forward({{"student", s}, {"teacher", t}});
    ASSERT_THAT(value, IsOk());
    if (step == 0) first = value->item<double>();
    last = value->item<double>();
    for (const at::Tensor& p : params) {
      if (p.grad().defined()) p.grad().zero_();
    }
    value->backward();
    at::NoGradGuard no_grad;
    for (const at::Tensor& p : params) p.sub_(0.1 * p.grad());
  }
  EXPECT_LT(last, first * 0.01) << first << " -> " << last;
  EXPECT_THAT((*loss)->Forward({{"student", at::randn({8, 4, 4, 4})}, {"teacher", t}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("its regressor maps 3 to 5 channels")));
}

// silverspoon-kd's JSD is symmetric at beta 0.5 and not at other betas; its beta must lie
// strictly between 0 and 1 (0 and 1 collapse it to a one-sided KL).
TEST(StandardLossesTest, JsdIsSymmetricAtOneHalf) {
  at::Generator generator = at::detail::createCPUGenerator(7);
  const at::Tensor a = at::randn({2, 3, 7}, generator) * 3, b = at::randn({2, 3, 7}, generator);
  auto half = MakeLoss("jsd", {{"beta", 0.5}, {"temperature", 2.0}});
  auto skew = MakeLoss("jsd", {{"beta", 0.2}});
  ASSERT_THAT(half, IsOk());
  ASSERT_THAT(skew, IsOk());
  auto value = [](std::unique_ptr<Loss>& loss, const at::Tensor& s, const at::Tensor& t) {
    return (*loss->Forward({{"student", s}, {"teacher", t}})).item<double>();
  };
  EXPECT_NEAR(value(*half, a, b), value(*half, b, a), 1e-6);
  EXPECT_GT(std::abs(value(*skew, a, b) - value(*skew, b, a)), 1e-4);
}

// silverspoon-kd's chunk_size: the divergences computed chunk by chunk (with a backward that
// recomputes each chunk) equal the whole computation, in value and in both inputs' gradients,
// for chunks that divide the tokens or not, and for bfloat16 inputs (upcast per chunk).
TEST(StandardLossesTest, ChunkedDivergencesEqualTheWholeComputation) {
  at::manual_seed(4);
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const at::Tensor s0 = (3 * at::randn({3, 7, 50})).to(dtype);
    const at::Tensor t0 = (3 * at::randn({3, 7, 50})).to(dtype);
    for (const std::string key : {"kl_divergence", "jsd"}) {
      Kwargs kwargs = {{"temperature", 2.5}};
      if (key == "jsd") kwargs["beta"] = 0.3;
      auto run = [&](int64_t chunk) {
        Kwargs with = kwargs;
        with["chunk_size"] = chunk;
        auto loss = MakeLoss(key, with);
        EXPECT_THAT(loss, IsOk());
        const at::Tensor s = s0.clone().requires_grad_(true), t = t0.clone().requires_grad_(true);
        at::Tensor value = *(*loss)->Forward({{"student", s}, {"teacher", t}});
        (value * 1.7).backward();
        return std::vector<at::Tensor>{value.detach(), s.grad(), t.grad()};
      };
      const std::vector<at::Tensor> whole = run(0);
      ASSERT_GT(whole[0].item<double>(), 0.1);
      for (const int64_t chunk : {1, 4, 20}) {  // 21 tokens: ragged and single chunks
        SCOPED_TRACE(absl::StrCat(key, " chunk ", chunk, " ", c10::toString(dtype)));
        const std::vector<at::Tensor> chunked = run(chunk);
        EXPECT_EQ(chunked[0].scalar_type(), at::kFloat);
        EXPECT_NEAR(chunked[0].item<double>(), whole[0].item<double>(),
                    1e-6 * whole[0].item<double>());
        for (int i : {1, 2}) {
          EXPECT_EQ(chunked[i].scalar_type(), dtype);
          EXPECT_TRUE(chunked[i].to(at::kFloat).allclose(whole[i].to(at::kFloat), 1e-4, 1e-6))
              << (i == 1 ? "student" : "teacher") << " gradient, max difference "
              << (chunked[i] - whole[i]).abs().max().item<double>();
        }
      }
    }
  }
}

TEST(StandardLossesTest, MistakesAreNamed) {
  auto kd = MakeLoss("KDLoss", {{"temperature", 4.0}});
  ASSERT_THAT(kd, IsOk());
  EXPECT_THAT((*kd)->Forward({{"student", at::randn({2, 3})}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("loss \"KDLoss\" needs the input \"teacher\"; given: student")));
  EXPECT_THAT((*kd)->Forward({{"student", at::randn({2, 3})}, {"teacher", at::randn({2, 4})}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("student has shape [2, 3] but teacher has [2, 4]")));
  // Elementwise losses take torch's names or a distillation config's.
  auto mse = MakeLoss("MSELoss", {});
  ASSERT_THAT(mse, IsOk());
  const at::Tensor a = at::ones({2, 2}), b = at::zeros({2, 2});
  EXPECT_THAT((*mse)->Forward({{"student", a}, {"teacher", b}}), IsOk());
  EXPECT_THAT((*mse)->Forward({{"input", a}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs the input \"target\"")));
  EXPECT_THAT(MakeLoss("KDLos", {}), StatusIs(absl::StatusCode::kNotFound,
                                              HasSubstr("did you mean \"KDLoss\"?")));
  EXPECT_THAT(MakeLoss("KDLoss", {{"temprature", 4.0}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("did you mean \"temperature\"?")));
}

}  // namespace
}  // namespace kd
