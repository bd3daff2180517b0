// "perplexity" and "token_accuracy" on the logits of transformers' own Llama
// (tests/testdata/make_lm_fixtures.py): perplexity is exp of transformers' loss on the batch,
// whether the batch comes at once or in parts; token accuracy is counted by hand here.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include <ATen/ATen.h>

#include "base/torch_file.h"
#include "distill/boxes/metrics/metrics.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

c10::impl::GenericDict Expected() {
  absl::StatusOr<c10::IValue> saved = ReadTorchFile(test::FixturePath("lm/llama/expected.pt"));
  EXPECT_THAT(saved, IsOk());
  return saved->toGenericDict();
}

TEST(LmMetricsTest, PerplexityIsExpOfTransformersLoss) {
  const auto expected = Expected();
  const at::Tensor logits = expected.at("logits").toTensor();
  const at::Tensor ids = expected.at("input_ids").toTensor();
  const double loss = expected.at("loss").toTensor().item<double>();
  absl::StatusOr<std::unique_ptr<Metric>> ppl = MakeMetric("perplexity", {});
  ASSERT_THAT(ppl, IsOk());
  (*ppl)->Update(logits, ids);
  EXPECT_NEAR((*ppl)->Value(), std::exp(loss), 1e-5 * std::exp(loss));
  // Row by row: the same tokens, the same perplexity; a label of -100 takes no part.
  (*ppl)->Reset();
  (*ppl)->Update(logits.narrow(0, 0, 1), ids.narrow(0, 0, 1));
  (*ppl)->Update(logits.narrow(0, 1, 1), ids.narrow(0, 1, 1));
  EXPECT_NEAR((*ppl)->Value(), std::exp(loss), 1e-5 * std::exp(loss));
  at::Tensor masked = ids.clone();
  masked.index_put_({0, 3}, -100);
  (*ppl)->Reset();
  (*ppl)->Update(logits, masked);
  const at::Tensor nll = -logits.log_softmax(-1);
  double sum = 0;
  int tokens = 0;
  for (int b = 0; b < 2; ++b) {
    for (int t = 0; t + 1 < 7; ++t) {
      const int64_t label = masked[b][t + 1].item<int64_t>();
      if (label == -100) continue;
      sum += nll[b][t][label].item<double>();
      ++tokens;
    }
  }
  EXPECT_EQ(tokens, 11);
  EXPECT_NEAR((*ppl)->Value(), std::exp(sum / tokens), 1e-5 * std::exp(sum / tokens));
}

TEST(LmMetricsTest, BitsPerByteIsTheLossInBitsPerByte) {
  const auto expected = Expected();
  const double loss = expected.at("loss").toTensor().item<double>();
  absl::StatusOr<std::unique_ptr<Metric>> bpb =
      MakeMetric("bits_per_byte", {{"bytes_per_token", 3.5}});
  ASSERT_THAT(bpb, IsOk());
  (*bpb)->Update(expected.at("logits").toTensor(), expected.at("input_ids").toTensor());
  EXPECT_NEAR((*bpb)->Value(), loss / std::log(2.0) / 3.5, 1e-6);
  EXPECT_THAT(MakeMetric("bits_per_byte", {}), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(LmMetricsTest, TokenAccuracyCountsTheArgmaxHits) {
  const auto expected = Expected();
  const at::Tensor logits = expected.at("logits").toTensor();
  const at::Tensor ids = expected.at("input_ids").toTensor();
  int hits = 0;
  for (int b = 0; b < 2; ++b) {
    for (int t = 0; t + 1 < 7; ++t) {
      hits += logits[b][t].argmax().item<int64_t>() == ids[b][t + 1].item<int64_t>();
    }
  }
  absl::StatusOr<std::unique_ptr<Metric>> accuracy = MakeMetric("token_accuracy", {});
  ASSERT_THAT(accuracy, IsOk());
  (*accuracy)->Update(logits, ids);
  EXPECT_DOUBLE_EQ((*accuracy)->Value(), hits / 12.0);
}

}  // namespace
}  // namespace kd
