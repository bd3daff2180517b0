#include "distill/boxes/torchdistill_aux_rule.h"

namespace kd {

Registry<TorchdistillAuxRule>& TorchdistillAuxRules() {
  static Registry<TorchdistillAuxRule>* const registry =
      NewGlobalRegistry<TorchdistillAuxRule>("torchdistill_aux_rule");
  return *registry;
}

}  // namespace kd
