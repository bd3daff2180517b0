// "CausalLMLoss" against transformers' own loss on its own Llama's logits
// (tests/testdata/make_lm_fixtures.py: model(input_ids, labels=input_ids).loss).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
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
    EXPECT_NEAR(value->item<double>(), expected.at("loss").toTensor().item<double>(), 1e-5) << name;
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

// GKD's loss as TRL's GKDTrainer takes it (tests/testdata/make_response_kd_fixtures.py writes
// its generalized_jsd_loss out): the student's and teacher's logits on the same tokens, the
// prompt's labels -100, logits[:, :-1] against labels[:, 1:], temperature 2. libkd's
// "generalized_jsd" with shift_labels reads the unshifted logits and labels and gives the same
// value, chunked or not.
TEST(SequenceDivergenceTest, GeneralizedJsdWithShiftedLabelsEqualsTrlsGkdLoss) {
  absl::StatusOr<c10::IValue> saved = ReadTorchFile(test::FixturePath("lm/response_kd.pt"));
  ASSERT_THAT(saved, IsOk());
  const auto expected = saved->toGenericDict();
  const at::Tensor student = expected.at("gkd.student").toTensor();
  const at::Tensor teacher = expected.at("gkd.teacher").toTensor();
  const at::Tensor labels = expected.at("gkd.labels").toTensor();
  for (const double beta : {0.1, 0.5, 0.9}) {
    const std::string key = absl::StrCat("gkd.beta", beta);
    for (const int64_t chunk : {0, 5}) {
      absl::StatusOr<std::unique_ptr<Loss>> loss = MakeLoss(
          "generalized_jsd",
          {{"beta", beta}, {"temperature", 2.0}, {"shift_labels", true}, {"chunk_size", chunk}});
      ASSERT_THAT(loss, IsOk());
      absl::StatusOr<at::Tensor> value =
          (*loss)->Forward({{"student", student}, {"teacher", teacher}, {"labels", labels}});
      ASSERT_THAT(value, IsOk());
      EXPECT_NEAR(value->item<double>(), expected.at(key).toTensor().item<double>(), 1e-6)
          << key << " chunk " << chunk;
    }
  }
}

// shift_labels keeps position t where label t + 1 is kept; chunk_size gives the unchunked
// value and gradient for every divergence that offers it; a missing label and a chunked
// reduction other than the token mean are refused with the fix.
TEST(SequenceDivergenceTest, ShiftedLabelsAndChunksKeepTheValueAndGradient) {
  at::manual_seed(3);
  const at::Tensor student = at::randn({2, 6, 11}, at::kFloat);
  const at::Tensor teacher = at::randn({2, 6, 11}, at::kFloat);
  const at::Tensor labels =
      at::tensor({5, 1, 2, 3, -100, -100, 4, 4, -100, 2, 2, 7}, at::kLong).view({2, 6});
  // The positions whose next label is kept: row 0 positions 0-2, row 1 positions 0, 2, 3, 4.
  const at::Tensor keep =
      at::tensor({1, 1, 1, 0, 0, 0, 1, 0, 1, 1, 1, 0}, at::kLong).view({2, 6}).to(at::kBool);
  for (const char* key : {"forward_kl", "reverse_kl", "generalized_jsd"}) {
    absl::StatusOr<std::unique_ptr<Loss>> shifted =
        MakeLoss(key, {{"shift_labels", true}, {"temperature", 1.5}});
    absl::StatusOr<std::unique_ptr<Loss>> plain = MakeLoss(key, {{"temperature", 1.5}});
    absl::StatusOr<std::unique_ptr<Loss>> chunked =
        MakeLoss(key, {{"shift_labels", true}, {"temperature", 1.5}, {"chunk_size", 2}});
    ASSERT_THAT(shifted, IsOk());
    ASSERT_THAT(plain, IsOk());
    ASSERT_THAT(chunked, IsOk());
    const at::Tensor kept_labels =
        at::where(keep, at::zeros_like(labels), at::full_like(labels, -100));
    absl::StatusOr<at::Tensor> reference =
        (*plain)->Forward({{"student", student}, {"teacher", teacher}, {"labels", kept_labels}});
    ASSERT_THAT(reference, IsOk());
    at::Tensor values[2], grads[2];
    std::unique_ptr<Loss>* losses[2] = {&*shifted, &*chunked};
    for (int i = 0; i < 2; ++i) {
      const at::Tensor s = student.clone().requires_grad_(true);
      absl::StatusOr<at::Tensor> value =
          (*losses[i])->Forward({{"student", s}, {"teacher", teacher}, {"labels", labels}});
      ASSERT_THAT(value, IsOk());
      value->backward();
      values[i] = value->detach();
      grads[i] = s.grad();
    }
    EXPECT_NEAR(values[0].item<double>(), reference->item<double>(), 1e-6) << key;
    EXPECT_NEAR(values[1].item<double>(), reference->item<double>(), 1e-5) << key;
    EXPECT_LE((grads[0] - grads[1]).abs().max().item<double>(), 1e-6) << key;
    // A position left out gets no gradient.
    EXPECT_EQ(grads[1].index({keep.logical_not()}).abs().max().item<double>(), 0.0) << key;
  }
  absl::StatusOr<std::unique_ptr<Loss>> no_labels =
      MakeLoss("forward_kl", {{"shift_labels", true}});
  ASSERT_THAT(no_labels, IsOk());
  EXPECT_THAT((*no_labels)->Forward({{"student", student}, {"teacher", teacher}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shift_labels needs")));
  EXPECT_THAT(MakeLoss("forward_kl", {{"chunk_size", 4}, {"reduction", std::string("sum")}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("set reduction \"token_mean\", or chunk_size 0")));
}

}  // namespace
}  // namespace kd
