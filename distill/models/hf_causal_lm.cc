#include "distill/models/hf_causal_lm.h"

#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file_util.h"
#include "base/kwargs.h"
#include "base/nearest.h"
#include "base/safetensors.h"
#include "base/status_macros.h"
#include "distill/models/hf_config.h"
#include "distill/models/model_registry.h"

namespace kd {
namespace {

constexpr char kTiedHead[] = "lm_head.weight";

// The name transformers saves a tied head's weight under: the input embedding's.
std::string EmbeddingName(const CausalLmConfig& c) {
  return c.architecture == "gpt2" ? "transformer.wte.weight" : "model.embed_tokens.weight";
}

absl::Status LoadWeights(CausalLm& lm, NamedTensors weights) {
  auto params = lm.named_parameters();
  std::vector<std::string> names;
  for (const auto& item : params) names.push_back(item.key());
  std::map<std::string, at::Tensor> given;
  for (auto& [name, tensor] : weights) {
    if (given.count(name)) return absl::DataLossError(absl::StrCat("weight \"", name, "\" twice"));
    given[name] = std::move(tensor);
  }
  if (const auto embedding = given.find(EmbeddingName(lm.config()));
      lm.config().tie_word_embeddings && embedding != given.end()) {
    if (auto it = given.find(kTiedHead); it != given.end()) {
      if (!at::equal(it->second, embedding->second)) {
        return absl::InvalidArgumentError(
            "lm_head.weight differs from the input embedding, but tie_word_embeddings is true "
            "in config.json (set it false to load an untied head)");
      }
      given.erase(it);
    }
  }
  std::vector<std::string> missing;
  at::NoGradGuard no_grad;
  for (auto& item : params) {
    const std::string& name = item.key();
    at::Tensor& p = item.value();
    const auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
      continue;
    }
    if (it->second.sizes() != p.sizes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "weight \"", name, "\" has shape [", absl::StrJoin(it->second.sizes(), ", "),
          "], the model (config.json) has [", absl::StrJoin(p.sizes(), ", "), "]"));
    }
    p.copy_(it->second);
    given.erase(it);
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        missing.size(), " weight(s) of the model are not in the files: ",
        absl::StrJoin(missing, ", ")));
  }
  if (!given.empty()) {
    const std::string& extra = given.begin()->first;
    return absl::InvalidArgumentError(absl::StrCat(
        given.size(), " weight(s) in the files are not the model's, \"", extra, "\" first; ",
        Suggest(extra, names), " (a config.json of another model?)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Model>> MakeHfCausalLm(const Kwargs& kwargs) {
  KD_ASSIGN_OR_RETURN(std::shared_ptr<CausalLm> lm,
                      LoadHfCausalLm(StringKwarg(kwargs, "path"),
                                     BoolKwarg(kwargs, "gradient_checkpointing")));
  return MakeCausalLmModel(std::move(lm));
}

KD_REGISTER(ModelRegistry(), "hf_causal_lm", MakeHfCausalLm,
            {{.name = "path",
              .type = KwargType::kString,
              .doc = "a Hugging Face model folder (config.json, model.safetensors)",
              .required = true},
             {.name = "gradient_checkpointing",
              .type = KwargType::kBool,
              .doc = "recompute each decoder layer in backward (less memory, more time)",
              .default_value = false}});

}  // namespace

absl::StatusOr<std::shared_ptr<CausalLm>> LoadHfCausalLm(const std::string& folder,
                                                         bool gradient_checkpointing) {
  const std::string config_path = (std::filesystem::path(folder) / "config.json").string();
  KD_ASSIGN_OR_RETURN(std::string text, ReadFile(config_path));
  absl::StatusOr<CausalLmConfig> config = ParseHfConfig(text);
  if (!config.ok()) return WithContext(config_path, config.status());
  config->gradient_checkpointing = gradient_checkpointing;
  KD_ASSIGN_OR_RETURN(std::shared_ptr<CausalLm> lm, MakeCausalLm(*config));
  KD_ASSIGN_OR_RETURN(NamedTensors weights, ReadHfWeights(folder));
  KD_RETURN_IF_ERROR(WithContext(folder, LoadWeights(*lm, std::move(weights))));
  return lm;
}

absl::Status SaveHfCausalLm(CausalLm& lm, const std::string& folder) {
  std::error_code error;
  if (std::filesystem::is_symlink(folder, error)) {
    return absl::InvalidArgumentError(
        absl::StrCat(folder, ": a symbolic link; give the folder itself"));
  }
  if (!std::filesystem::exists(folder, error) && ::mkdir(folder.c_str(), 0755) != 0) {
    return absl::NotFoundError(
        absl::StrCat(folder, ": cannot make the folder (does its parent exist?)"));
  }
  NamedTensors tensors;
  for (const auto& item : lm.named_parameters()) {
    tensors.emplace_back(item.key(), item.value().detach().to(at::kCPU, at::kFloat).contiguous());
  }
  KD_RETURN_IF_ERROR(
      WriteFileAtomically((std::filesystem::path(folder) / "config.json").string(),
                          HfConfigJson(lm.config())));
  return WriteHfWeights(folder, tensors);
}

}  // namespace kd
