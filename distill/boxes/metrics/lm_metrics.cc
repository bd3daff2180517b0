// Language-model metrics on logits [B, T, V] and labels [B, T] in transformers' convention
// (position t's logits predict labels[t + 1]; -100 takes no part): "perplexity", the exp of the
// mean next-token negative log-likelihood over the tokens with labels (transformers' loss,
// exponentiated, as its run_clm example reports it), and "token_accuracy", the fraction of
// those tokens whose label is the most likely next token, and "bits_per_byte", the same NLL in
// bits per byte of text, given the text's bytes per token (//tools:tokenize's meta.json holds
// each split's bytes and tokens): a measure that does not depend on the tokenizer.
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/ATen.h>

#include "base/kwargs.h"
#include "distill/boxes/metrics/metrics.h"
#include "distill/config/plugin_kinds.h"
#include "distill/models/next_token.h"

namespace kd {
namespace {

// Next-token logits [N, V] and labels [N] of the positions with a label.
std::pair<at::Tensor, at::Tensor> NextTokens(const at::Tensor& logits, const at::Tensor& labels) {
  TORCH_CHECK(logits.dim() == 3 && labels.dim() == 2 && logits.size(0) == labels.size(0) &&
                  logits.size(1) == labels.size(1),
              "a language-model metric takes logits [B, T, V] and labels [B, T], got ",
              logits.sizes(), " and ", labels.sizes());
  const at::Tensor next = NextTokenLabels(labels).reshape(-1);
  const at::Tensor keep = next.ne(-100);
  return {logits.reshape({-1, logits.size(2)}).index({keep}).to(at::kFloat), next.index({keep})};
}

// The mean next-token NLL (nats) over the tokens with a label, as sums.
class Perplexity : public Metric {
 public:
  void Reset() override { nll_ = 0, tokens_ = 0; }
  void Update(const at::Tensor& output, const at::Tensor& targets) override {
    auto [logits, labels] = NextTokens(output, targets);
    nll_ += at::cross_entropy_loss(logits, labels, {}, at::Reduction::Sum).item<double>();
    tokens_ += static_cast<double>(labels.size(0));
  }
  double Value() const override { return tokens_ == 0 ? 0.0 : std::exp(nll_ / tokens_); }
  std::vector<double> Sums() const override { return {nll_, tokens_}; }

 protected:
  double MeanNll() const { return tokens_ == 0 ? 0.0 : nll_ / tokens_; }

 public:
  void SetSums(const std::vector<double>& sums) override {
    TORCH_CHECK(sums.size() == 2, "perplexity: 2 sums expected, got ", sums.size());
    nll_ = sums[0], tokens_ = sums[1];
  }

 private:
  double nll_ = 0, tokens_ = 0;
};

class BitsPerByte final : public Perplexity {
 public:
  explicit BitsPerByte(double bytes_per_token) : bytes_per_token_(bytes_per_token) {}
  double Value() const override { return MeanNll() / std::log(2.0) / bytes_per_token_; }

 private:
  double bytes_per_token_;
};

class TokenAccuracy final : public Metric {
 public:
  void Reset() override { hits_ = 0, tokens_ = 0; }
  void Update(const at::Tensor& output, const at::Tensor& targets) override {
    auto [logits, labels] = NextTokens(output, targets);
    hits_ += static_cast<double>(logits.argmax(1).eq(labels).sum().item<int64_t>());
    tokens_ += static_cast<double>(labels.size(0));
  }
  double Value() const override { return tokens_ == 0 ? 0.0 : hits_ / tokens_; }
  std::vector<double> Sums() const override { return {hits_, tokens_}; }
  void SetSums(const std::vector<double>& sums) override {
    TORCH_CHECK(sums.size() == 2, "token_accuracy: 2 sums expected, got ", sums.size());
    hits_ = sums[0], tokens_ = sums[1];
  }

 private:
  double hits_ = 0, tokens_ = 0;
};

KD_REGISTER(MetricRegistry(), "perplexity",
            ([](const Kwargs&) -> absl::StatusOr<std::unique_ptr<Metric>> {
              return std::unique_ptr<Metric>(std::make_unique<Perplexity>());
            }),
            {});
KD_REGISTER(MetricRegistry(), "bits_per_byte",
            ([](const Kwargs& kwargs) -> absl::StatusOr<std::unique_ptr<Metric>> {
              return std::unique_ptr<Metric>(
                  std::make_unique<BitsPerByte>(NumberKwarg(kwargs, "bytes_per_token")));
            }),
            {{.name = "bytes_per_token",
              .type = KwargType::kNumber,
              .doc = "bytes of text per token of the evaluated split (meta.json's bytes / tokens)",
              .min = 0.0,
              .min_exclusive = true,
              .required = true}});
KD_REGISTER(MetricRegistry(), "token_accuracy",
            ([](const Kwargs&) -> absl::StatusOr<std::unique_ptr<Metric>> {
              return std::unique_ptr<Metric>(std::make_unique<TokenAccuracy>());
            }),
            {});

}  // namespace
}  // namespace kd
