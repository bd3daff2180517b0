// The model registry's "llama", "qwen2" and "gpt2": causal LMs built from a config's kwargs
// (transformers' config.json names), as kd::Models. A library of its own, so that code that
// needs the classes alone (generation, the on-policy process) does not register models.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/kwargs.h"
#include "base/status_macros.h"
#include "distill/models/causal_lm.h"
#include "distill/models/model_registry.h"

namespace kd {
namespace {

absl::StatusOr<std::unique_ptr<Model>> MakeRegisteredLm(const std::string& architecture,
                                                        const Kwargs& kwargs) {
  CausalLmConfig c{.architecture = architecture,
                   .vocab_size = IntKwarg(kwargs, "vocab_size"),
                   .hidden_size = IntKwarg(kwargs, "hidden_size"),
                   .intermediate_size = IntKwarg(kwargs, "intermediate_size"),
                   .num_hidden_layers = IntKwarg(kwargs, "num_hidden_layers"),
                   .num_attention_heads = IntKwarg(kwargs, "num_attention_heads"),
                   .num_key_value_heads = IntKwarg(kwargs, "num_key_value_heads"),
                   .max_position_embeddings = IntKwarg(kwargs, "max_position_embeddings"),
                   .tie_word_embeddings = BoolKwarg(kwargs, "tie_word_embeddings"),
                   .hidden_act = architecture == "gpt2" ? "gelu_new" : "silu",
                   .dropout = NumberKwarg(kwargs, "dropout"),
                   .gradient_checkpointing = BoolKwarg(kwargs, "gradient_checkpointing")};
  if (architecture == "gpt2") c.norm_eps = 1e-5;
  KD_ASSIGN_OR_RETURN(std::shared_ptr<CausalLm> lm, MakeCausalLm(c));
  return MakeCausalLmModel(std::move(lm));
}

std::vector<KwargSpec> LmSpecs(bool tied_default) {
  auto integer = [](const char* name, const char* doc, int64_t dflt, int64_t min) {
    return KwargSpec{
        .name = name, .type = KwargType::kInteger, .doc = doc, .default_value = dflt, .min = min};
  };
  return {integer("vocab_size", "tokens of the vocabulary", 32000, 1),
          integer("hidden_size", "width of the hidden states", 256, 1),
          integer("intermediate_size", "width of the MLP; 0: 4 * hidden_size (GPT-2)", 0, 0),
          integer("num_hidden_layers", "decoder layers", 4, 1),
          integer("num_attention_heads", "attention heads", 4, 1),
          integer("num_key_value_heads", "key/value heads (grouped-query); 0: as many", 0, 0),
          integer("max_position_embeddings", "the longest sequence (GPT-2's positions)", 1024, 1),
          {.name = "tie_word_embeddings",
           .type = KwargType::kBool,
           .doc = "lm_head reads the input embedding's weight",
           .default_value = tied_default},
          {.name = "dropout",
           .type = KwargType::kNumber,
           .doc = "dropout of attention and residuals in training",
           .default_value = 0.0,
           .min = 0.0,
           .max = 0.99},
          {.name = "gradient_checkpointing",
           .type = KwargType::kBool,
           .doc = "recompute each decoder layer in backward (less memory, more time)",
           .default_value = false}};
}

KD_REGISTER(
    ModelRegistry(), "llama",
    [](const Kwargs& kwargs) { return MakeRegisteredLm("llama", kwargs); }, LmSpecs(false));
KD_REGISTER(
    ModelRegistry(), "qwen2",
    [](const Kwargs& kwargs) { return MakeRegisteredLm("qwen2", kwargs); }, LmSpecs(false));
KD_REGISTER(
    ModelRegistry(), "gpt2", [](const Kwargs& kwargs) { return MakeRegisteredLm("gpt2", kwargs); },
    LmSpecs(true));

}  // namespace
}  // namespace kd
