#include "distill/models/torchdistill_model_rule.h"

namespace kd {

Registry<TorchdistillModelRule>& TorchdistillModelRules() {
  static Registry<TorchdistillModelRule>* const registry =
      NewGlobalRegistry<TorchdistillModelRule>("torchdistill_model_rule");
  return *registry;
}

}  // namespace kd
