// The native causal LMs against transformers' own (tests/testdata/make_lm_fixtures.py: small
// random-init Llama with grouped-query attention, Qwen2 with a tied head, GPT-2): logits, every
// decoder layer's hidden states, the loss and every parameter's gradient within 1e-5 relative;
// padded batches; greedy generation token for token; config.json read and written.
#include "distill/models/causal_lm.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "base/file_util.h"
#include "base/torch_file.h"
#include "distill/models/generate.h"
#include "distill/models/hf_causal_lm.h"
#include "distill/models/hf_config.h"
#include "distill/models/model_registry.h"
#include "distill/models/next_token.h"
#include "hooks/hook_point.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace {

using ::testing::HasSubstr;

struct Fixture {
  std::shared_ptr<CausalLm> lm;
  std::map<std::string, at::Tensor> expected;
};

// The model of tests/testdata/lm/<name>/config.json with the fixture's weights.
Fixture Load(const std::string& name) {
  const std::string dir = test::FixturePath("lm/" + name);
  Fixture f;
  absl::StatusOr<std::string> text = ReadFile(dir + "/config.json");
  EXPECT_THAT(text, IsOk());
  absl::StatusOr<CausalLmConfig> config = ParseHfConfig(*text);
  EXPECT_THAT(config, IsOk());
  absl::StatusOr<std::shared_ptr<CausalLm>> lm = MakeCausalLm(*config);
  EXPECT_THAT(lm, IsOk());
  f.lm = *lm;
  absl::StatusOr<c10::IValue> saved = ReadTorchFile(dir + "/expected.pt");
  EXPECT_THAT(saved, IsOk());
  for (const auto& entry : saved->toGenericDict()) {
    f.expected[entry.key().toStringRef()] = entry.value().toTensor();
  }
  at::NoGradGuard no_grad;
  int copied = 0;
  for (auto& item : f.lm->named_parameters()) {
    const std::string& param = item.key();
    at::Tensor& tensor = item.value();
    tensor.copy_(f.expected.at("weights." + param));
    ++copied;
  }
  EXPECT_GT(copied, 10);
  f.lm->eval();
  return f;
}

class CausalLmTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

TEST_P(CausalLmTest, LogitsAndHiddenStatesEqualTransformers) {
  Fixture f = Load(GetParam());
  const std::string prefix = GetParam() == "gpt2" ? "transformer.h." : "model.layers.";
  std::map<int, at::Tensor> hidden;
  std::vector<HookHandle> handles;
  const auto modules = f.lm->named_modules();
  for (int i = 0; i < f.lm->config().num_hidden_layers; ++i) {
    handles.push_back(
        AddNativeHook(*modules[prefix + std::to_string(i)],
                      [&hidden, i](const std::vector<c10::IValue>&, const c10::IValue& out) {
                        hidden[i] = out.toTensor();
                      }));
  }
  at::NoGradGuard no_grad;
  test::ExpectNearScale(f.lm->forward(f.expected.at("input_ids")), f.expected.at("logits"),
                        "logits");
  ASSERT_EQ(hidden.size(), 2u);
  for (const auto& [i, value] : hidden) {
    test::ExpectNearScale(value, f.expected.at("hidden." + std::to_string(i)),
                          "hidden " + std::to_string(i));
  }
  // A left-padded row: its tokens' logits as transformers' (the padding positions' are noise
  // there and here alike, and not compared).
  const at::Tensor masked = f.lm->Logits(
      {.input_ids = f.expected.at("input_ids"), .attention_mask = f.expected.at("attention_mask")});
  test::ExpectNearScale(masked.select(0, 0), f.expected.at("masked_logits").select(0, 0), "row 0");
  test::ExpectNearScale(masked[1].narrow(0, 3, 4),
                        f.expected.at("masked_logits")[1].narrow(0, 3, 4), "padded row's tokens");
}

TEST_P(CausalLmTest, LossAndGradientsEqualTransformers) {
  Fixture f = Load(GetParam());
  const at::Tensor ids = f.expected.at("input_ids");
  const at::Tensor loss = NextTokenLoss(f.lm->forward(ids), ids);
  test::ExpectNearScale(loss, f.expected.at("loss"), "loss");
  loss.backward();
  int compared = 0;
  for (const auto& item : f.lm->named_parameters()) {
    const std::string& param = item.key();
    const at::Tensor& tensor = item.value();
    test::ExpectNearScale(tensor.grad(), f.expected.at("grad." + param), "grad " + param);
    ++compared;
  }
  EXPECT_GT(compared, 10);
}

TEST_P(CausalLmTest, GreedyGenerationEqualsTransformers) {
  Fixture f = Load(GetParam());
  for (bool cache : {true, false}) {
    absl::StatusOr<at::Tensor> ids =
        Generate(*f.lm, f.expected.at("prompt"), f.expected.at("prompt_mask"),
                 {.max_new_tokens = 6, .use_cache = cache});
    ASSERT_THAT(ids, IsOk());
    EXPECT_TRUE(at::equal(*ids, f.expected.at("greedy")))
        << "cache " << cache << ": " << *ids << " vs " << f.expected.at("greedy");
  }
}

TEST_P(CausalLmTest, GradientCheckpointingGivesTheSameGradients) {
  Fixture plain = Load(GetParam());
  CausalLmConfig config = plain.lm->config();
  config.gradient_checkpointing = true;
  absl::StatusOr<std::shared_ptr<CausalLm>> checkpointed = MakeCausalLm(config);
  ASSERT_THAT(checkpointed, IsOk());
  {
    at::NoGradGuard no_grad;
    auto theirs = plain.lm->named_parameters();
    for (auto& item : (*checkpointed)->named_parameters()) item.value().copy_(theirs[item.key()]);
  }
  // In training mode, with dropout (GPT-2's 0.1): the recomputed forward draws the first run's
  // masks.
  const at::Tensor ids = plain.expected.at("input_ids");
  plain.lm->train();
  (*checkpointed)->train();
  at::manual_seed(5);
  NextTokenLoss(plain.lm->forward(ids), ids).backward();
  at::manual_seed(5);
  NextTokenLoss((*checkpointed)->forward(ids), ids).backward();
  auto theirs = plain.lm->named_parameters();
  for (const auto& item : (*checkpointed)->named_parameters()) {
    test::ExpectNearScale(item.value().grad(), theirs[item.key()].grad(),
                          "checkpointed grad " + item.key());
  }
}

// The fixture's folder as transformers' save_pretrained wrote it loads with the same logits;
// libkd's save of it loads back to the same weights, tied head and all.
TEST_P(CausalLmTest, HuggingFaceFoldersLoadAndSave) {
  Fixture f = Load(GetParam());
  absl::StatusOr<std::shared_ptr<CausalLm>> loaded =
      LoadHfCausalLm(test::FixturePath("lm/" + GetParam()));
  ASSERT_THAT(loaded, IsOk());
  (*loaded)->eval();
  at::NoGradGuard no_grad;
  test::ExpectNearScale((*loaded)->forward(f.expected.at("input_ids")), f.expected.at("logits"),
                        "loaded");
  const std::string dir = test::TempPath("saved_" + GetParam());
  ASSERT_THAT(SaveHfCausalLm(**loaded, dir), IsOk());
  absl::StatusOr<std::shared_ptr<CausalLm>> again = LoadHfCausalLm(dir);
  ASSERT_THAT(again, IsOk());
  auto mine = (*loaded)->named_parameters();
  for (const auto& item : (*again)->named_parameters()) {
    EXPECT_TRUE(at::equal(item.value(), mine[item.key()])) << item.key();
  }
  EXPECT_EQ((*again)->config().tie_word_embeddings, f.lm->config().tie_word_embeddings);
}

INSTANTIATE_TEST_SUITE_P(Architectures, CausalLmTest, ::testing::Values("llama", "qwen2", "gpt2"));

TEST(HfConfigTest, WrittenConfigReadsBackTheSame) {
  for (const std::string name : {"llama", "qwen2", "gpt2"}) {
    absl::StatusOr<std::string> text = ReadFile(test::FixturePath("lm/" + name + "/config.json"));
    ASSERT_THAT(text, IsOk());
    absl::StatusOr<CausalLmConfig> config = ParseHfConfig(*text);
    ASSERT_THAT(config, IsOk());
    absl::StatusOr<CausalLmConfig> again = ParseHfConfig(HfConfigJson(*config));
    ASSERT_THAT(again, IsOk());
    EXPECT_EQ(HfConfigJson(*again), HfConfigJson(*config)) << name;
  }
}

TEST(HfConfigTest, BadConfigsNameTheField) {
  EXPECT_THAT(ParseHfConfig(R"({"model_type": "mistral", "vocab_size": 8})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"mistral\" is not one libkd has; it has: llama, qwen2")));
  EXPECT_THAT(ParseHfConfig("{"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a JSON object")));
  EXPECT_THAT(ParseHfConfig(R"({"model_type": "llama", "vocab_size": "many"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("vocab_size must be")));
  EXPECT_THAT(
      ParseHfConfig(R"({"model_type": "llama", "vocab_size": 8, "hidden_size": 6,
                        "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 4})"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("multiple of num_attention_heads")));
  EXPECT_THAT(ParseHfConfig(R"({"model_type": "llama", "vocab_size": 8, "hidden_size": 8,
                        "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
                        "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rope_type \"yarn\"")));
}

TEST(HfCausalLmTest, BadFoldersAreNamed) {
  EXPECT_THAT(LoadHfCausalLm(test::TempPath("no_such_model")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("config.json")));
  // A folder whose config describes another model than its weights.
  const std::string dir = test::TempPath("mismatched");
  absl::StatusOr<std::shared_ptr<CausalLm>> llama = LoadHfCausalLm(test::FixturePath("lm/llama"));
  ASSERT_THAT(llama, IsOk());
  ASSERT_THAT(SaveHfCausalLm(**llama, dir), IsOk());
  absl::StatusOr<std::string> gpt2 = ReadFile(test::FixturePath("lm/gpt2/config.json"));
  ASSERT_THAT(gpt2, IsOk());
  ASSERT_THAT(WriteFileAtomically(dir + "/config.json", *gpt2), IsOk());
  EXPECT_THAT(LoadHfCausalLm(dir), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("weight(s) of the model are not in")));
}

TEST(CausalLmRegistryTest, RegisteredLmsBuildAndRun) {
  for (const std::string key : {"llama", "qwen2", "gpt2"}) {
    absl::StatusOr<std::unique_ptr<Model>> model =
        MakeRegisteredModel(key, {{"vocab_size", int64_t{16}},
                                  {"hidden_size", int64_t{8}},
                                  {"intermediate_size", int64_t{12}},
                                  {"num_hidden_layers", int64_t{1}},
                                  {"num_attention_heads", int64_t{2}}});
    ASSERT_THAT(model, IsOk()) << key;
    const at::Tensor logits = (*model)->Forward({at::randint(0, 16, {2, 5}, at::kLong)}).toTensor();
    EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 5, 16})) << key;
  }
}

}  // namespace
}  // namespace kd
