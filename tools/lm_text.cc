#include "tools/lm_text.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace kd {

absl::StatusOr<std::vector<std::string>> GenerateText(CausalLm& lm,
                                                      const SentencePieceTokenizer& tokenizer,
                                                      const std::vector<std::string>& prompts,
                                                      GenerateOptions options) {
  if (tokenizer.vocab_size() > lm.config().vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("the tokenizer has ", tokenizer.vocab_size(),
                                                   " pieces, the model ", lm.config().vocab_size,
                                                   " tokens: are they of the same run?"));
  }
  std::vector<std::vector<int>> ids;
  size_t longest = 0;
  for (const std::string& prompt : prompts) {
    ids.push_back(tokenizer.Encode(prompt));
    if (tokenizer.bos_id() >= 0) ids.back().insert(ids.back().begin(), tokenizer.bos_id());
    if (ids.back().empty()) return absl::InvalidArgumentError("an empty prompt");
    longest = std::max(longest, ids.back().size());
  }
  const int64_t pad = tokenizer.pad_id() >= 0 ? tokenizer.pad_id() : 0;
  at::Tensor batch =
      at::full({static_cast<int64_t>(ids.size()), static_cast<int64_t>(longest)}, pad, at::kLong);
  at::Tensor mask = at::zeros_like(batch);
  for (size_t b = 0; b < ids.size(); ++b) {
    const int64_t offset = static_cast<int64_t>(longest - ids[b].size());
    for (size_t t = 0; t < ids[b].size(); ++t) {
      batch[b][offset + static_cast<int64_t>(t)] = ids[b][t];
    }
    mask[b].narrow(0, offset, static_cast<int64_t>(ids[b].size())).fill_(1);
  }
  options.pad_token_id = pad;
  if (tokenizer.eos_id() >= 0) options.eos_token_id = tokenizer.eos_id();
  KD_ASSIGN_OR_RETURN(at::Tensor out, Generate(lm, batch, mask, options));
  std::vector<std::string> texts;
  for (int64_t b = 0; b < out.size(0); ++b) {
    std::vector<int> row;
    for (int64_t t = 0; t < out.size(1); ++t) {
      const int64_t id = out[b][t].item<int64_t>();
      if (mask.size(1) > t && mask[b][t].item<int64_t>() == 0) continue;  // padding
      if (t >= mask.size(1) && options.eos_token_id == id) break;
      row.push_back(static_cast<int>(id));
    }
    KD_ASSIGN_OR_RETURN(std::string text, tokenizer.Decode(row));
    texts.push_back(std::move(text));
  }
  return texts;
}

}  // namespace kd
