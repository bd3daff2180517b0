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
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "distill/data/sentencepiece_tokenizer.h"
#include "distill/models/hf_causal_lm.h"
#include "tools/lm_text.h"
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
  KD_ASSIGN_OR_RETURN(
      std::unique_ptr<SentencePieceTokenizer> tokenizer,
      SentencePieceTokenizer::Load(ResolveUserPath(absl::GetFlag(FLAGS_tokenizer))));
  KD_ASSIGN_OR_RETURN(std::shared_ptr<CausalLm> lm,
                      LoadHfCausalLm(ResolveUserPath(absl::GetFlag(FLAGS_model))));
  KD_ASSIGN_OR_RETURN(std::vector<std::string> texts,
                      GenerateText(*lm, *tokenizer, prompts,
                                   {.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens),
                                    .do_sample = absl::GetFlag(FLAGS_do_sample),
                                    .temperature = absl::GetFlag(FLAGS_temperature),
                                    .top_k = absl::GetFlag(FLAGS_top_k),
                                    .top_p = absl::GetFlag(FLAGS_top_p),
                                    .seed = absl::GetFlag(FLAGS_seed)}));
  for (const std::string& text : texts) std::cout << text << "\n\n";
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
