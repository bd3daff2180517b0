// Distilling a causal LM as silverspoon-kd and TRL users do: response-based KD (a soft loss
// beside alpha times the student's own next-token loss, magnitude-aware or not) equal to
// silverspoon-kd's ResponseBasedDistiller.compute_loss, value and gradients; GKD's on-policy
// batches (the student's own continuations) seeded, resumable and beside an exact teacher cache.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "base/torch_file.h"
#include "distill/boxes/box.h"
#include "distill/boxes/testing/box_test_fixture.h"
#include "distill/models/causal_lm.h"
#include "distill/models/hf_causal_lm.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace {

using test::BoxTest;
using test::ExpectSameStudent;
using test::Parse;
using test::RunDir;

// Ids below 64 (the fixtures' vocabulary) in runs of 6 following id -> (5 * id + 3) mod 64.
std::string WriteTokens(const std::string& name, int64_t tokens, uint32_t seed) {
  return test::WriteRuleTokens(name, tokens, seed, {.vocab = 64, .run = 6, .mul = 5, .add = 3});
}

std::string TokenData(const std::string& path, int block) {
  return absl::StrCat("datasets { id: \"train\" key: \"token_file\" kwargs { name: \"path\" ",
                      "str: \"", path, "\" } kwargs { name: \"block_size\" integer: ", block,
                      " } kwargs { name: \"vocab_size\" integer: 64 } }");
}

std::string HfModel(const char* role, const std::string& folder) {
  return absl::StrCat(role, " { native { key: \"hf_causal_lm\" kwargs { name: \"path\" str: \"",
                      test::FixturePath("lm/" + folder), "\" } } }");
}

// --- Response-based KD against silverspoon-kd ---------------------------------------------

// tests/testdata/lm/response_kd.pt (make_response_kd_fixtures.py's), entry by entry.
std::map<std::string, at::Tensor> LoadExpected() {
  std::map<std::string, at::Tensor> expected;
  absl::StatusOr<c10::IValue> saved = ReadTorchFile(test::FixturePath("lm/response_kd.pt"));
  EXPECT_THAT(saved, IsOk());
  if (!saved.ok()) return expected;
  for (const auto& entry : saved->toGenericDict()) {
    expected[entry.key().toStringRef()] = entry.value().toTensor();
  }
  return expected;
}

// ResponseBasedDistiller's loss as libkd's criterion: the soft loss (silverspoon-kd's key, on
// the whole logits as it takes them) weighted 1 - alpha, transformers' next-token loss weighted
// alpha; at alpha 0 silverspoon-kd computes no hard loss, so the criterion has one term.
std::string ResponseKdCriterion(const std::string& soft_kwargs, double alpha, bool magnitude) {
  std::string terms = absl::StrCat(
      "terms { name: \"soft\" ", soft_kwargs, " weight: ", 1 - alpha,
      " inputs { arg: \"student\" source: STUDENT } inputs { arg: \"teacher\" source: TEACHER } }");
  if (alpha > 0) {
    absl::StrAppend(&terms, "terms { name: \"hard\" key: \"CausalLMLoss\" weight: ", alpha,
                    " inputs { arg: \"input\" source: STUDENT } ",
                    "inputs { arg: \"labels\" source: TARGETS } }");
  }
  return absl::StrCat("criterion { ", terms, magnitude ? " magnitude_aware_weighting: true" : "",
                      " }");
}

TEST_F(BoxTest, ResponseBasedKdEqualsSilverspoonKdsLossAndGradients) {
  const std::map<std::string, at::Tensor> expected = LoadExpected();
  ASSERT_FALSE(expected.empty());
  const at::Tensor ids = expected.at("input_ids");
  const std::string data = TokenData(WriteTokens("response_kd.bin", 12 * 8, 3), 12);
  const std::map<std::string, std::string> softs = {
      {"kl_div", "key: \"kl_div\" kwargs { name: \"temperature\" number: 2 }"},
      {"jsd",
       "key: \"jsd\" kwargs { name: \"temperature\" number: 2 } kwargs { name: \"beta\" number: "
       "0.3 }"}};
  int cases = 0;
  for (const auto& [soft, kwargs] : softs) {
    for (const double alpha : {0.0, 0.5, 1.0}) {
      for (const bool magnitude : {false, true}) {
        if (magnitude && alpha == 0) continue;
        const std::string name = absl::StrCat(soft, "_a", alpha, magnitude ? "_mag" : "");
        SCOPED_TRACE(name);
        // The models handed in, so that the test reads the student's gradients.
        absl::StatusOr<std::shared_ptr<CausalLm>> student =
            LoadHfCausalLm(test::FixturePath("lm/kd_student"));
        absl::StatusOr<std::shared_ptr<CausalLm>> teacher =
            LoadHfCausalLm(test::FixturePath("lm/llama"));
        ASSERT_THAT(student, IsOk());
        ASSERT_THAT(teacher, IsOk());
        const std::string config =
            absl::StrCat(R"pb(run { name: "response_kd" seed: 1 })pb", data,
                         R"pb(train { name: "kd" num_epochs: 1
                                      train_data_loader { dataset_id: "train" batch_size: 2 }
                                      optimizer {
                                        key: "SGD"
                                        kwargs { name: "lr" number: 0.1 }
                                      }
                                      teacher_cache { mode: OFF }
                                      overlap_teacher: OFF)pb",
                         " ", ResponseKdCriterion(kwargs, alpha, magnitude), "}");
        auto box = MakeBox(
            Parse(config),
            {.teacher = MakeCausalLmModel(*teacher), .student = MakeCausalLmModel(*student)},
            {.run_dir = RunDir("response_kd_" + std::to_string(cases))});
        ASSERT_THAT(box, IsOk());
        ASSERT_THAT((*box)->PreEpoch(0), IsOk());
        Batch batch{.samples = ids, .targets = ids};
        ASSERT_THAT((*box)->PreForward(batch), IsOk());
        absl::StatusOr<at::Tensor> loss = (*box)->Forward(batch);
        ASSERT_THAT(loss, IsOk());
        test::ExpectNearScale(loss->detach(), expected.at("loss." + name), "loss");
        loss->backward();
        int params = 0;
        for (const auto& item : (*student)->named_parameters()) {
          test::ExpectNearScale(item.value().grad(), expected.at("grad." + name + "." + item.key()),
                                "grad of " + item.key());
          ++params;
        }
        EXPECT_EQ(params, 12);
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 10);
  // Magnitude-aware weighting changes the gradient, not the value: the fixture tells them
  // apart, so the comparison above is not vacuous.
  EXPECT_FALSE(at::allclose(expected.at("grad.kl_div_a0.5.lm_head.weight"),
                            expected.at("grad.kl_div_a0.5_mag.lm_head.weight")));
}

// --- GKD's on-policy batches --------------------------------------------------------------

// A Llama teacher (the fixture's) distilled into the smaller one on windows of 12 tokens: with
// probability lmbda a batch's windows keep their first 6 tokens and the student writes the
// other 6; the generalized JSD takes the student's tokens (the prompt's labels are -100).
std::string OnPolicyConfig(int epochs, double lmbda, int seed, const std::string& extra) {
  return absl::StrCat(R"pb(run { name: "gkd" seed: 5 })pb",
                      TokenData(WriteTokens("gkd.bin", 12 * 48, 8), 12),
                      HfModel("teacher", "llama"), HfModel("student", "kd_student"),
                      "train { name: \"gkd\" num_epochs: ", epochs, " ",
                      R"pb(train_data_loader { dataset_id: "train" batch_size: 8 shuffle: true }
                           optimizer {
                             key: "AdamW"
                             kwargs { name: "lr" number: 0.003 }
                           }
                           criterion {
                             terms {
                               key: "generalized_jsd"
                               kwargs { name: "beta" number: 0.5 }
                               kwargs { name: "shift_labels" boolean: true }
                               inputs { arg: "student" source: STUDENT }
                               inputs { arg: "teacher" source: TEACHER }
                               inputs { arg: "labels" source: TARGETS }
                             }
                           }
                           pre_forward_proc { key: "on_policy_generation"
                                              kwargs { name: "max_new_tokens" integer: 6 }
                                              kwargs { name: "temperature" number: 1 })pb",
                      " kwargs { name: \"lmbda\" number: ", lmbda,
                      " } kwargs { name: \"seed\" integer: ", seed, " } } ", extra, " }");
}

TEST_F(BoxTest, OnPolicyBatchesAreTheStudentsSeededContinuations) {
  auto continued = [](int seed) -> at::Tensor {
    auto box = MakeBox(Parse(OnPolicyConfig(1, 1.0, seed, "")),
                       {.run_dir = RunDir(absl::StrCat("gkd_draw_", seed))});
    EXPECT_THAT(box, IsOk());
    if (!box.ok()) return {};
    EXPECT_THAT((*box)->PreEpoch(0), IsOk());
    const at::Tensor ids = at::arange(24, at::kLong).remainder(64).view({2, 12});
    Batch batch{.samples = ids, .targets = ids.clone()};
    EXPECT_THAT((*box)->PreForward(batch), IsOk());
    const at::Tensor out = batch.samples.toTensor();
    const at::Tensor labels = batch.targets.toTensor();
    EXPECT_EQ(out.sizes(), ids.sizes());
    // The prompt is kept, its labels are -100; the continuation is the labels' rest.
    EXPECT_TRUE(at::equal(out.narrow(1, 0, 6), ids.narrow(1, 0, 6)));
    EXPECT_TRUE(labels.narrow(1, 0, 6).eq(-100).all().item<bool>());
    EXPECT_TRUE(at::equal(labels.narrow(1, 6, 6), out.narrow(1, 6, 6)));
    return out;
  };
  const at::Tensor a = continued(1), b = continued(1), c = continued(2);
  ASSERT_TRUE(a.defined() && c.defined());
  EXPECT_TRUE(at::equal(a, b));   // the same seed, the same tokens
  EXPECT_FALSE(at::equal(a, c));  // another seed, others
  // lmbda 0 leaves the dataset's batch as it is.
  auto box = MakeBox(Parse(OnPolicyConfig(1, 0.0, 1, "")), {.run_dir = RunDir("gkd_off")});
  ASSERT_THAT(box, IsOk());
  ASSERT_THAT((*box)->PreEpoch(0), IsOk());
  const at::Tensor ids = at::arange(24, at::kLong).view({2, 12});
  Batch batch{.samples = ids, .targets = ids};
  ASSERT_THAT((*box)->PreForward(batch), IsOk());
  EXPECT_TRUE(at::equal(batch.samples.toTensor(), ids));
}

TEST_F(BoxTest, AnOnPolicyRunResumesExactlyAndItsTeacherCacheIsExact) {
  // Resumed after its first epoch, the run equals the uninterrupted one bit for bit.
  const std::string whole = RunDir("gkd_whole"), parts = RunDir("gkd_parts");
  const std::string off = "teacher_cache { mode: OFF } overlap_teacher: OFF";
  ASSERT_THAT((*MakeBox(Parse(OnPolicyConfig(2, 0.5, 7, off)), {.run_dir = whole}))->Run(), IsOk());
  ASSERT_THAT((*MakeBox(Parse(OnPolicyConfig(1, 0.5, 7, off)), {.run_dir = parts}))->Run(), IsOk());
  auto resumed = MakeBox(Parse(OnPolicyConfig(2, 0.5, 7, off)), {.run_dir = parts, .resume = true});
  ASSERT_THAT(resumed, IsOk());
  auto result = (*resumed)->Run();
  ASSERT_THAT(result, IsOk());
  EXPECT_EQ(result->epochs_run, 1);
  ExpectSameStudent(whole, parts);

  // With the teacher cache on, the on-policy batches (no window index) run the teacher and the
  // dataset's batches are served from the cache: the same student bit for bit.
  const std::string cached = RunDir("gkd_cached");
  test::ExpectTeacherCacheServesSecondEpoch(
      Parse(OnPolicyConfig(2, 0.5, 7, "teacher_cache { mode: AUTO } overlap_teacher: OFF")),
      cached);
  ExpectSameStudent(whole, cached);
}

}  // namespace
}  // namespace kd
