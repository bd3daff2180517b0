// How a torchdistill model name becomes a libkd model: a model declares, where it registers,
// the torchdistill names it stands for (KD_REGISTER(TorchdistillModelRules(), "wide_resnet40_4",
// TorchdistillModelRule{.libkd_key = "wrn", .fixed = {{"depth", 40}, {"widen_factor", 4}},
// .renamed = {{"dropout_p", "dropout"}}}, kAnyKwargs)), and //tools:import_torchdistill applies
// it (distill/torchdistill/importer.h). A torchdistill name that is also a libkd key
// (resnet20) needs no rule.
#ifndef LIBKD_DISTILL_MODELS_TORCHDISTILL_MODEL_RULE_H_
#define LIBKD_DISTILL_MODELS_TORCHDISTILL_MODEL_RULE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/registry.h"

namespace kd {

struct TorchdistillModelRule {
  std::string libkd_key;
  // Integer kwargs the torchdistill name fixes (wide_resnet40_4: depth 40, widen factor 4).
  std::vector<std::pair<std::string, int64_t>> fixed;
  // torchdistill's kwarg name -> libkd's.
  std::vector<std::pair<std::string, std::string>> renamed;
};

// torchdistill's model name -> its rule ("torchdistill_model_rule" registry kind).
Registry<TorchdistillModelRule>& TorchdistillModelRules();

}  // namespace kd

#endif  // LIBKD_DISTILL_MODELS_TORCHDISTILL_MODEL_RULE_H_
