// Internal to distill/boxes: the kwarg specs torchdistill's method modules share
// (method_modules.cc, factor_transfer_modules.cc, knowledge_review_modules.cc).
#ifndef LIBKD_DISTILL_BOXES_INTERNAL_METHOD_MODULE_SPECS_H_
#define LIBKD_DISTILL_BOXES_INTERNAL_METHOD_MODULE_SPECS_H_

#include <cstdint>
#include <vector>

#include "base/kwargs.h"

namespace kd {
namespace boxes_internal {

// `specs` followed by `more`.
inline std::vector<KwargSpec> With(std::vector<KwargSpec> specs, std::vector<KwargSpec> more) {
  specs.insert(specs.end(), more.begin(), more.end());
  return specs;
}

// A required channel (or feature) count, >= 1.
inline KwargSpec Channels(const char* name, const char* doc) {
  return {.name = name, .type = KwargType::kInteger, .doc = doc, .min = 1, .required = true};
}

// A convolution's kernel_size, stride (default 1) and padding, described as `whose` ("the
// convolution's").
inline std::vector<KwargSpec> ConvGeometrySpecs(int64_t kernel_size, int64_t padding,
                                                const char* whose) {
  return {{.name = "kernel_size",
           .type = KwargType::kInteger,
           .doc = whose,
           .default_value = kernel_size,
           .min = 1},
          {.name = "stride",
           .type = KwargType::kInteger,
           .doc = whose,
           .default_value = int64_t{1},
           .min = 1},
          {.name = "padding",
           .type = KwargType::kInteger,
           .doc = whose,
           .default_value = padding,
           .min = 0}};
}

}  // namespace boxes_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_INTERNAL_METHOD_MODULE_SPECS_H_
