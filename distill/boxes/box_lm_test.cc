// A causal LM trained by a box from a config, as a silverspoon-kd user's student starts: token
// files ("token_file"), a native Llama ("llama"), transformers' next-token loss
// ("CausalLMLoss"), validation perplexity and token accuracy, the best checkpoint chosen by the
// lowest validation perplexity.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "distill/boxes/box.h"
#include "distill/boxes/testing/box_test_fixture.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using test::BoxTest;
using test::Parse;
using test::RunDir;

// A stream of uint16 ids following a rule a small model learns: each id is (3 * previous + 1)
// mod 32, restarted at a random id every 8 tokens (so the first token of a run is unknowable).
std::string WriteTokens(const std::string& name, int64_t tokens, uint32_t seed) {
  const std::string path = test::TempPath(name);
  std::ofstream out(path, std::ios::binary);
  uint32_t state = seed;
  uint16_t id = 0;
  for (int64_t i = 0; i < tokens; ++i) {
    if (i % 8 == 0) {
      state = state * 1664525u + 1013904223u;
      id = static_cast<uint16_t>((state >> 16) % 32);
    } else {
      id = static_cast<uint16_t>((3 * id + 1) % 32);
    }
    out.write(reinterpret_cast<const char*>(&id), sizeof(id));
  }
  return path;
}

std::string TokenData(const std::string& id, const std::string& path) {
  return absl::StrCat("datasets { id: \"", id, "\" key: \"token_file\" kwargs { name: \"path\" ",
                      "str: \"", path, "\" } kwargs { name: \"block_size\" integer: 16 } ",
                      "kwargs { name: \"vocab_size\" integer: 32 } }");
}

constexpr char kLlama[] = R"pb(
  student {
    native {
      key: "llama"
      kwargs { name: "vocab_size" integer: 32 }
      kwargs { name: "hidden_size" integer: 32 }
      kwargs { name: "intermediate_size" integer: 64 }
      kwargs { name: "num_hidden_layers" integer: 2 }
      kwargs { name: "num_attention_heads" integer: 4 }
      kwargs { name: "num_key_value_heads" integer: 2 }
    }
  }
)pb";

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
                   TokenData("val", WriteTokens("lm_val.bin", 16 * 64, 11)), kLlama, kStage);
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

}  // namespace
}  // namespace kd
