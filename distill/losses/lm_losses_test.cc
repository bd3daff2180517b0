// "CausalLMLoss" against transformers' own loss on its own Llama's logits
// (tests/testdata/make_lm_fixtures.py: model(input_ids, labels=input_ids).loss).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>

#include <ATen/ATen.h>

#include "base/torch_file.h"
#include "distill/losses/loss.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::HasSubstr;

TEST(CausalLmLossTest, EqualsTransformersLoss) {
  for (const char* name : {"llama", "qwen2", "gpt2"}) {
    absl::StatusOr<c10::IValue> saved =
        ReadTorchFile(test::FixturePath(std::string("lm/") + name + "/expected.pt"));
    ASSERT_THAT(saved, IsOk());
    const auto expected = saved->toGenericDict();
    absl::StatusOr<std::unique_ptr<Loss>> loss = MakeLoss("CausalLMLoss", {});
    ASSERT_THAT(loss, IsOk());
    const at::Tensor ids = expected.at("input_ids").toTensor();
    absl::StatusOr<at::Tensor> value =
        (*loss)->Forward({{"input", expected.at("logits").toTensor()}, {"labels", ids}});
    ASSERT_THAT(value, IsOk());
    EXPECT_NEAR(value->item<double>(), expected.at("loss").toTensor().item<double>(), 1e-5)
        << name;
  }
}

TEST(CausalLmLossTest, IgnoredLabelsTakeNoPartAndShapesAreChecked) {
  absl::StatusOr<std::unique_ptr<Loss>> loss = MakeLoss("CausalLMLoss", {});
  ASSERT_THAT(loss, IsOk());
  // Two positions predict labels 1 and 2 of a 3-token sequence; the last label is ignored, so
  // only position 0 counts: -log softmax(logits[0])[1].
  const at::Tensor logits =
      at::tensor({1.0, 2.0, 0.5, 0.0, 0.0, 3.0, 1.0, 1.0, 1.0}).view({1, 3, 3});
  const at::Tensor labels = at::tensor({0, 1, -100}, at::kLong).view({1, 3});
  absl::StatusOr<at::Tensor> value = (*loss)->Forward({{"input", logits}, {"labels", labels}});
  ASSERT_THAT(value, IsOk());
  const double expected = -at::log_softmax(logits[0][0], 0)[1].item<double>();
  EXPECT_NEAR(value->item<double>(), expected, 1e-6);
  EXPECT_THAT((*loss)->Forward({{"input", logits.view({3, 3})}, {"labels", labels}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("(B, T, V)")));
}

}  // namespace
}  // namespace kd
