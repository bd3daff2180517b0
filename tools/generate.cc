// generate: text from a causal LM in a Hugging Face folder (config.json + model.safetensors, as
// transformers' save_pretrained and libkd's SaveHfCausalLm write it), through a SentencePiece
// tokenizer (//tools:tokenize makes one): greedy, or sampling with a temperature, top-k and
// top-p from a seed; several prompts (one per line of --prompts_file) as one left-padded batch.
//
//   bazel run //tools:generate -- --model=runs/lm/student_hf --tokenizer=data/tokenizer.model
//       --prompt="The cat" --max_new_tokens=40 --do_sample --temperature=0.8 --top_p=0.95
//
// Prints each prompt's continuation (the prompt included) on its own block. Exit codes: 0 OK,
// 2 bad input (a missing or unreadable folder or tokenizer, bad flags), 1 a failure of the run.
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "distill/data/sentencepiece_tokenizer.h"
#include "distill/models/generate.h"
#include "distill/models/hf_causal_lm.h"
#include "tools/tool_util.h"

ABSL_FLAG(std::string, model, "", "A Hugging Face model folder (config.json, model.safetensors).");
ABSL_FLAG(std::string, tokenizer, "", "A SentencePiece .model file (//tools:tokenize's).");
ABSL_FLAG(std::string, prompt, "", "The prompt (text). One of --prompt and --prompts_file.");
ABSL_FLAG(std::string, prompts_file, "", "A file of prompts, one per line (a batch).");
ABSL_FLAG(int64_t, max_new_tokens, 40, "Tokens generated after each prompt at most.");
ABSL_FLAG(bool, do_sample, false, "Sample (temperature, top-k, top-p) instead of greedy.");
ABSL_FLAG(double, temperature, 1.0, "Sampling temperature, > 0.");
ABSL_FLAG(int64_t, top_k, 50, "Keep the k most likely tokens when sampling; 0: all.");
ABSL_FLAG(double, top_p, 1.0, "Keep the most likely tokens up to this probability, in (0, 1].");
ABSL_FLAG(uint64_t, seed, 0, "The sampling generator's seed.");
ABSL_FLAG(int32_t, threads, 0, "Intra-op threads; 0: libtorch's default.");

namespace kd {
namespace {

constexpr char kTool[] = "generate";

absl::StatusOr<std::vector<std::string>> Prompts() {
  const std::string one = absl::GetFlag(FLAGS_prompt);
  const std::string file = absl::GetFlag(FLAGS_prompts_file);
  if (one.empty() == file.empty()) {
    return absl::InvalidArgumentError("give one of --prompt and --prompts_file");
  }
  if (!one.empty()) return std::vector<std::string>{one};
  KD_ASSIGN_OR_RETURN(std::string text, ReadFile(ResolveUserPath(file)));
  std::vector<std::string> prompts;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    prompts.emplace_back(line);
  }
  if (prompts.empty()) return absl::InvalidArgumentError(absl::StrCat(file, ": no prompt in it"));
  return prompts;
}

absl::Status Run() {
  if (absl::GetFlag(FLAGS_model).empty() || absl::GetFlag(FLAGS_tokenizer).empty()) {
    return absl::InvalidArgumentError("--model and --tokenizer are required");
  }
  if (absl::GetFlag(FLAGS_threads) > 0) at::set_num_threads(absl::GetFlag(FLAGS_threads));
  KD_ASSIGN_OR_RETURN(std::vector<std::string> prompts, Prompts());
  KD_ASSIGN_OR_RETURN(std::unique_ptr<SentencePieceTokenizer> tokenizer,
                      SentencePieceTokenizer::Load(ResolveUserPath(absl::GetFlag(FLAGS_tokenizer))));
  KD_ASSIGN_OR_RETURN(std::shared_ptr<CausalLm> lm,
                      LoadHfCausalLm(ResolveUserPath(absl::GetFlag(FLAGS_model))));
  if (tokenizer->vocab_size() > lm->config().vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the tokenizer has ", tokenizer->vocab_size(), " pieces, the model ",
        lm->config().vocab_size, " tokens: are they of the same run?"));
  }
  // Left padding, as transformers' generate wants it for a decoder-only model.
  std::vector<std::vector<int>> ids;
  size_t longest = 0;
  for (const std::string& prompt : prompts) {
    ids.push_back(tokenizer->Encode(prompt));
    if (tokenizer->bos_id() >= 0) ids.back().insert(ids.back().begin(), tokenizer->bos_id());
    if (ids.back().empty()) return absl::InvalidArgumentError("an empty prompt");
    longest = std::max(longest, ids.back().size());
  }
  const int64_t pad = tokenizer->pad_id() >= 0 ? tokenizer->pad_id() : 0;
  at::Tensor batch = at::full({static_cast<int64_t>(ids.size()), static_cast<int64_t>(longest)},
                              pad, at::kLong);
  at::Tensor mask = at::zeros_like(batch);
  for (size_t b = 0; b < ids.size(); ++b) {
    const int64_t offset = static_cast<int64_t>(longest - ids[b].size());
    for (size_t t = 0; t < ids[b].size(); ++t) {
      batch[b][offset + static_cast<int64_t>(t)] = ids[b][t];
    }
    mask[b].narrow(0, offset, static_cast<int64_t>(ids[b].size())).fill_(1);
  }
  GenerateOptions options{.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens),
                          .do_sample = absl::GetFlag(FLAGS_do_sample),
                          .temperature = absl::GetFlag(FLAGS_temperature),
                          .top_k = absl::GetFlag(FLAGS_top_k),
                          .top_p = absl::GetFlag(FLAGS_top_p),
                          .pad_token_id = pad,
                          .seed = absl::GetFlag(FLAGS_seed)};
  if (tokenizer->eos_id() >= 0) options.eos_token_id = tokenizer->eos_id();
  KD_ASSIGN_OR_RETURN(at::Tensor out, Generate(*lm, batch, mask, options));
  for (int64_t b = 0; b < out.size(0); ++b) {
    std::vector<int> row;
    for (int64_t t = 0; t < out.size(1); ++t) {
      const int64_t id = out[b][t].item<int64_t>();
      if (mask.size(1) > t && mask[b][t].item<int64_t>() == 0) continue;  // padding
      if (t >= mask.size(1) && options.eos_token_id == id) break;
      row.push_back(static_cast<int>(id));
    }
    KD_ASSIGN_OR_RETURN(std::string text, tokenizer->Decode(row));
    std::cout << text << "\n\n";
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Generates text from a causal LM in a Hugging Face folder through a SentencePiece "
      "tokenizer.\nUsage: bazel run //tools:generate -- --model=DIR --tokenizer=tokenizer.model "
      "--prompt=TEXT [--max_new_tokens=40] [--do_sample --temperature=0.8 --top_p=0.95]");
  ParseFlagsOrExit(argc, argv, kTool);
  const absl::Status status = Run();
  if (!status.ok()) {
    Fail(kTool, status.message());
    return ExitCodeOf(status);
  }
  return 0;
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) { return kd::FinishOutput(kd::kTool, kd::Main(argc, argv)); }
