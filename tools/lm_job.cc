#include "tools/lm_job.h"

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "distill/boxes/model_paths.h"
#include "distill/data/sentencepiece_tokenizer.h"
#include "distill/models/causal_lm.h"
#include "distill/models/hf_causal_lm.h"
#include "google/protobuf/text_format.h"
#include "hooks/native_model.h"
#include "tools/lm_text.h"
#include "tools/run_log.pb.h"
#include "tools/run_report.h"
#include "tools/token_corpus.h"

namespace kd {
namespace {

constexpr char kLmDataPrefix[] = "runs/lm/data/";

// The token files' paths of `config` (kLmDataPrefix in the configs) in `data`.
void PointAtLmData(DistillConfig& config, const std::string& data) {
  for (DatasetConfig& dataset : *config.mutable_datasets()) {
    for (Kwarg& kwarg : *dataset.mutable_kwargs()) {
      if (kwarg.name() == "path" && absl::StartsWith(kwarg.str(), kLmDataPrefix)) {
        kwarg.set_str(absl::StrCat(data, "/", kwarg.str().substr(sizeof(kLmDataPrefix) - 1)));
      }
    }
  }
}

// A trained LM of the job: its parameters, its Hugging Face folder (<dir>/hf, for transformers'
// from_pretrained and //tools:generate) and its continuations of `prompts`.
struct LmResult {
  int64_t parameters = 0;
  std::vector<std::string> samples;
};

absl::StatusOr<LmResult> DescribeLm(const DistillConfig& config, const std::string& dir,
                                    const SentencePieceTokenizer& tokenizer,
                                    const std::vector<std::string>& prompts) {
  ModelConfig trained = config.student();
  trained.set_src_ckpt(dir + "/model.pt");
  KD_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, LoadModel(trained, "", "student"));
  std::shared_ptr<CausalLm> lm = std::dynamic_pointer_cast<CausalLm>(GetNativeModule(*model));
  if (lm == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": the LM job's models are native causal LMs (llama, qwen2, gpt2)"));
  }
  LmResult result;
  for (const NamedTensor& param : model->NamedParameters())
    result.parameters += param.second.numel();
  KD_RETURN_IF_ERROR(SaveHfCausalLm(*lm, dir + "/hf"));
  KD_ASSIGN_OR_RETURN(
      result.samples,
      GenerateText(
          *lm, tokenizer, prompts,
          {.max_new_tokens = 24, .do_sample = true, .temperature = 0.8, .top_k = 40, .seed = 1}));
  return result;
}

}  // namespace

absl::Status RunLmJob(std::vector<DistillConfig> configs, const LmJobOptions& options) {
  const std::string& root = options.root;
  if (configs.size() != std::size(kLmJobParts)) {
    return absl::InvalidArgumentError(absl::StrCat("the LM job has ", std::size(kLmJobParts),
                                                   " parts; ", configs.size(), " configs given"));
  }
  // The corpus tokenized once (a tokenizer trained on its train split, the three splits as
  // token files): a resumed run reuses it, --overwrite makes it again.
  const std::string data = root + "/data";
  std::error_code error;
  if (options.overwrite || !std::filesystem::exists(data + "/meta.json", error)) {
    KD_RETURN_IF_ERROR(CheckNotInSystemFolder(root));
    const bool made_root = !std::filesystem::exists(root, error);
    std::filesystem::create_directories(root, error);
    if (error) {
      return absl::UnavailableError(absl::StrCat(root, ": cannot make it: ", error.message()));
    }
    absl::StatusOr<TokenCorpusSummary> corpus =
        WriteTokenCorpus({.corpus = options.corpus,
                          .out_dir = data,
                          .out_dir_name = "the LM job's data folder",
                          .vocab_size = 2048,
                          .seed = 1,
                          .overwrite = options.overwrite});
    if (!corpus.ok()) {
      if (made_root) std::filesystem::remove(root, error);  // nothing left behind
      return corpus.status();
    }
    std::cerr << absl::StrFormat(
        "distill: tokenized %s into %s: %d documents; train %d, validation %d, test %d tokens "
        "(BPE, %d pieces)\n",
        options.corpus, data, corpus->documents, corpus->splits[0].tokens, corpus->splits[1].tokens,
        corpus->splits[2].tokens, corpus->vocab_size);
  }
  absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> tokenizer =
      SentencePieceTokenizer::Load(data + "/tokenizer.model");
  if (!tokenizer.ok()) return absl::InvalidArgumentError(tokenizer.status().message());
  const std::string teacher_ckpt = root + "/teacher/model.pt";
  const std::vector<std::string> prompts = {"The meaning of life is", "A computer", "Never trust"};
  std::vector<RunSummary> summaries;
  std::vector<LmResult> results;
  for (size_t i = 0; i < configs.size(); ++i) {
    DistillConfig& config = configs[i];
    const char* name = kLmJobParts[i].name;
    const std::string dir = absl::StrCat(root, "/", name);
    PointAtLmData(config, data);
    config.mutable_student()->set_dst_ckpt(dir + "/model.pt");
    if (config.has_teacher()) config.mutable_teacher()->set_src_ckpt(teacher_ckpt);
    // A student made from the teacher (ignore_mismatched_sizes: the blockwise part's narrower
    // layers) starts from part 1's teacher wherever the shapes agree.
    if (config.student().ignore_mismatched_sizes()) {
      config.mutable_student()->set_src_ckpt(teacher_ckpt);
    }
    std::string text;
    google::protobuf::TextFormat::PrintToString(config, &text);
    KD_ASSIGN_OR_RETURN(RunSummary summary,
                        WithContext(name, RunJob(config, name, text, options.job_options(dir))));
    KD_ASSIGN_OR_RETURN(LmResult result,
                        WithContext(name, DescribeLm(config, dir, **tokenizer, prompts)));
    summaries.push_back(std::move(summary));
    results.push_back(std::move(result));
  }
  std::cout << absl::StrFormat("\n%-12s %-16s %10s %15s %14s %9s\n", "model", "box", "parameters",
                               "test perplexity", "test token acc", "time");
  for (size_t i = 0; i < summaries.size(); ++i) {
    const RunSummary& s = summaries[i];
    std::cout << absl::StrFormat(
        "%-12s %-16s %9.2fM %15.2f %13.2f%% %9s\n", s.name(), s.box(), results[i].parameters / 1e6,
        MetricOrNan(s.test_metrics(), "perplexity"),
        100 * MetricOrNan(s.test_metrics(), "token_accuracy"), Clock(s.seconds()));
  }
  std::cout << "\nSampled continuations (temperature 0.8, top-k 40, seed 1):\n";
  for (size_t p = 0; p < prompts.size(); ++p) {
    for (size_t i = 0; i < summaries.size(); ++i) {
      std::cout << absl::StrFormat("  %-12s %s\n", summaries[i].name(),
                                   absl::CHexEscape(results[i].samples[p]));
    }
  }
  std::cout << "\nThe models as Hugging Face folders: " << root << "/<model>/hf\n";
  return absl::OkStatus();
}

}  // namespace kd
