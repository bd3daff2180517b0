// A causal LM trained by a box from a config, as a silverspoon-kd user's student starts: token
// files ("token_file"), a native Llama ("llama"), transformers' next-token loss
// ("CausalLMLoss"), validation perplexity and token accuracy, the best checkpoint chosen by the
// lowest validation perplexity.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/modules/embedding.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "distill/boxes/box.h"
#include "distill/boxes/testing/box_test_fixture.h"
#include "distill/models/causal_lm.h"
#include "hooks/native_model.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using test::BoxTest;
using test::Parse;
using test::RunDir;

// Ids below 32 in runs of 8 following id -> (3 * id + 1) mod 32: 14 of a window of 16's 15
// predictions are certain, the run's restart unknowable.
std::string WriteTokens(const std::string& name, int64_t tokens, uint32_t seed) {
  return test::WriteRuleTokens(name, tokens, seed);
}

std::string TokenData(const std::string& id, const std::string& path) {
  return absl::StrCat("datasets { id: \"", id, "\" key: \"token_file\" kwargs { name: \"path\" ",
                      "str: \"", path, "\" } kwargs { name: \"block_size\" integer: 16 } ",
                      "kwargs { name: \"vocab_size\" integer: 32 } }");
}

// The config section `role` ("teacher", "student") of a native Llama over 32 ids.
std::string Llama(const char* role, int hidden, int intermediate, int layers, int heads,
                  int kv_heads = 0) {
  auto kwarg = [](const char* name, int value) {
    return absl::StrCat("kwargs { name: \"", name, "\" integer: ", value, " } ");
  };
  return absl::StrCat(role, " { native { key: \"llama\" ", kwarg("vocab_size", 32),
                      kwarg("hidden_size", hidden), kwarg("intermediate_size", intermediate),
                      kwarg("num_hidden_layers", layers), kwarg("num_attention_heads", heads),
                      kwarg("num_key_value_heads", kv_heads), "} }");
}

// Runs a box of `config` over `inputs` in `dir`: its epochs' teacher-cache reports.
std::vector<TeacherCacheReport> RunReports(const std::string& config, BoxInputs inputs,
                                           const std::string& dir) {
  std::vector<TeacherCacheReport> reports;
  auto box = MakeBox(Parse(config), std::move(inputs),
                     {.run_dir = dir, .on_epoch = [&](const EpochReport& r) {
                        if (r.teacher_cache) reports.push_back(*r.teacher_cache);
                      }});
  EXPECT_THAT(box, IsOk());
  if (box.ok()) {
    auto result = (*box)->Run();
    EXPECT_THAT(result, IsOk());
    if (result.ok()) {
      EXPECT_LT(result->epochs.back().train_loss, result->epochs.front().train_loss);
    }
  }
  return reports;
}

constexpr char kStage[] = R"pb(
  train {
    name: "lm"
    num_epochs: 4
    train_data_loader { dataset_id: "train" batch_size: 16 shuffle: true }
    val_data_loader { dataset_id: "val" batch_size: 32 }
    optimizer {
      key: "AdamW"
      kwargs { name: "lr" number: 0.01 }
    }
    criterion {
      terms {
        key: "CausalLMLoss"
        inputs { arg: "input" source: STUDENT }
        inputs { arg: "labels" source: TARGETS }
      }
    }
  }
  evaluation {
    metrics { key: "perplexity" }
    metrics { key: "token_accuracy" }
    primary_metric: "perplexity"
    lower_is_better: true
  }
)pb";

TEST_F(BoxTest, ACausalLmTrainsOnTokenFilesAndKeepsItsBestPerplexity) {
  const std::string config =
      absl::StrCat(R"pb(run { name: "lm" seed: 1 })pb",
                   TokenData("train", WriteTokens("lm_train.bin", 16 * 256, 7)),
                   TokenData("val", WriteTokens("lm_val.bin", 16 * 64, 11)),
                   Llama("student", 32, 64, 2, 4, 2), kStage);
  auto box = MakeBox(Parse(config), {.run_dir = RunDir("lm")});
  ASSERT_THAT(box, IsOk());
  auto result = (*box)->Run();
  ASSERT_THAT(result, IsOk());
  ASSERT_EQ(result->epochs.size(), 4u);
  // A uniform guess over 32 ids is perplexity 32; in a window of 16 the rule makes 14 of the 15
  // predictions certain (the restart at position 8 stays unknown), so a model that learned it
  // sits near 32^(1/15) ~ 1.26.
  const double first = result->epochs.front().metrics.at("perplexity");
  const double best = [&] {
    double lowest = first;
    for (const auto& epoch : result->epochs)
      lowest = std::min(lowest, epoch.metrics.at("perplexity"));
    return lowest;
  }();
  EXPECT_LT(first, 32.0);
  EXPECT_LT(best, 4.0);
  EXPECT_GT(result->epochs.back().metrics.at("token_accuracy"), 0.6);
  EXPECT_LT(result->epochs.back().train_loss, result->epochs.front().train_loss);
  // The validation loss of a causal LM is the mean next-token NLL: the log of the perplexity.
  for (const auto& epoch : result->epochs) {
    EXPECT_NEAR(epoch.metrics.at("loss"), std::log(epoch.metrics.at("perplexity")), 1e-6);
  }
  // The run ends with the student of the lowest validation perplexity.
  EXPECT_THAT(result->tested_checkpoint, ::testing::HasSubstr("best.pt"));
  EXPECT_NEAR(result->final_metrics.at("perplexity"),
              result->epochs.back().metrics.at("perplexity"), 1e-9);
}

// A 2-layer Llama teacher distilled into a 1-layer one: forward KL on the logits (GKD's and
// DistiLLM's divergence, masked by the labels) beside the next-token loss, and the student's
// last hidden states regressed onto the teacher's, both read by hooks on transformers' paths
// ("model.layers.0", "model.layers.1"). The teacher cache keys
// each token window by its index (a token dataset has no random transforms): from the second
// epoch the teacher runs on no window, and the student equals the run without the cache bit
// for bit.
std::string DistillationConfig(const std::string& cache) {
  constexpr char kKdStage[] = R"pb(
    name: "kd"
    num_epochs: 3
    train_data_loader { dataset_id: "train" batch_size: 16 shuffle: true }
    optimizer {
      key: "AdamW"
      kwargs { name: "lr" number: 0.01 }
    }
    teacher { forward_hooks { module_path: "model.layers.1" requires_output: true } }
    student { forward_hooks { module_path: "model.layers.0" requires_output: true } }
    criterion {
      terms {
        key: "forward_kl"
        inputs { arg: "student" source: STUDENT }
        inputs { arg: "teacher" source: TEACHER }
        inputs { arg: "labels" source: TARGETS }
      }
      terms {
        key: "CausalLMLoss"
        weight: 0.5
        inputs { arg: "input" source: STUDENT }
        inputs { arg: "labels" source: TARGETS }
      }
      terms {
        key: "MSELoss"
        weight: 0.1
        inputs { arg: "input" source: STUDENT path: "model.layers.0" }
        inputs { arg: "target" source: TEACHER path: "model.layers.1" }
      }
    }
  )pb";
  return absl::StrCat(R"pb(run { name: "lm_kd" seed: 2 })pb",
                      TokenData("train", WriteTokens("kd_train.bin", 16 * 64, 5)),
                      Llama("teacher", 32, 64, 2, 4), Llama("student", 32, 32, 1, 2), "train {",
                      kKdStage, cache, "}");
}

TEST_F(BoxTest, ALlamaDistilsIntoASmallerOneWithTheTeacherCacheExact) {
  const std::string off = RunDir("lm_kd_off"), on = RunDir("lm_kd_on");
  RunReports(DistillationConfig("teacher_cache { mode: OFF } overlap_teacher: OFF"), {}, off);
  const std::vector<TeacherCacheReport> reports =
      RunReports(DistillationConfig("teacher_cache { mode: ON } overlap_teacher: OFF"), {}, on);
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_TRUE(reports[0].on) << reports[0].off_reason;
  EXPECT_EQ(reports[0].hits, 0);
  EXPECT_GT(reports[1].hits, 0);
  EXPECT_GT(reports[2].hits, 0);
  test::ExpectSameStudent(off, on);
}

// A teacher whose forward returns a dict, as Hugging Face's models do: {"logits": ...,
// "embeddings": its input embeddings}. Losses read the entries by `key` (a dict output's
// "logits" is also its output tensor), and the teacher cache keeps them entry by entry: the
// student equals the run without the cache bit for bit.
std::unique_ptr<Model> DictTeacher() {
  at::manual_seed(3);
  std::shared_ptr<CausalLm> lm = *MakeCausalLm({.architecture = "llama",
                                                .vocab_size = 32,
                                                .hidden_size = 32,
                                                .intermediate_size = 64,
                                                .num_hidden_layers = 2,
                                                .num_attention_heads = 4});
  CausalLm* impl = lm.get();
  auto* embed = impl->named_modules()["model.embed_tokens"]->as<torch::nn::Embedding>();
  return MakeNativeModel(lm, [impl, embed](std::vector<c10::IValue>& args, const Kwargs&) {
    const at::Tensor ids = args.at(0).toTensor();
    c10::Dict<std::string, at::Tensor> out;
    out.insert("logits", impl->Logits({.input_ids = ids}));
    out.insert("embeddings", embed->forward(ids));
    return c10::IValue(out);
  });
}

std::string DictTeacherConfig(const std::string& cache) {
  constexpr char kStage[] = R"pb(
    train {
      name: "kd"
      num_epochs: 2
      train_data_loader { dataset_id: "train" batch_size: 16 shuffle: true }
      optimizer {
        key: "AdamW"
        kwargs { name: "lr" number: 0.01 }
      }
      student { forward_hooks { module_path: "model.embed_tokens" requires_output: true } }
      criterion {
        terms {
          key: "forward_kl"
          inputs { arg: "student" source: STUDENT }
          inputs { arg: "teacher" source: TEACHER key: "logits" }
          inputs { arg: "labels" source: TARGETS }
        }
        terms {
          key: "MSELoss"
          weight: 0.1
          inputs { arg: "input" source: STUDENT path: "model.embed_tokens" }
          inputs { arg: "target" source: TEACHER key: "embeddings" }
        }
      }
  )pb";
  return absl::StrCat(R"pb(run { name: "dict" seed: 4 })pb",
                      TokenData("train", WriteTokens("dict_train.bin", 16 * 32, 9)),
                      Llama("student", 32, 32, 1, 2), kStage, cache, "}");
}

TEST_F(BoxTest, ATeachersDictOutputIsReadByKeyAndCachedExactly) {
  const std::string off = RunDir("dict_off"), on = RunDir("dict_on");
  RunReports(DictTeacherConfig("teacher_cache { mode: OFF } overlap_teacher: OFF"),
             {.teacher = DictTeacher()}, off);
  const std::vector<TeacherCacheReport> reports =
      RunReports(DictTeacherConfig("teacher_cache { mode: ON } overlap_teacher: OFF"),
                 {.teacher = DictTeacher()}, on);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_TRUE(reports[0].on) << reports[0].off_reason;
  EXPECT_GT(reports[1].hits, 0);
  test::ExpectSameStudent(off, on);
  // A key the dict does not have is named, with the ones it has.
  auto bad = MakeBox(Parse(absl::StrReplaceAll(DictTeacherConfig(""),
                                               {{"key: \"embeddings\"", "key: \"embedding\""}})),
                     {.teacher = DictTeacher()}, {.run_dir = RunDir("dict_bad")});
  ASSERT_THAT(bad, IsOk());
  EXPECT_THAT((*bad)->Run(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(::testing::HasSubstr("[\"embedding\"]: the dict has no key"),
                                        ::testing::HasSubstr("did you mean \"embeddings\""))));
}

}  // namespace
}  // namespace kd
