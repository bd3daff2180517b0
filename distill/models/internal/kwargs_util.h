// The specs of kwargs that several models share. (A factory reads its kwargs with the readers of
// base/kwargs.h: MakeRegisteredModel has checked them and filled the defaults.)
#ifndef LIBKD_DISTILL_MODELS_INTERNAL_KWARGS_UTIL_H_
#define LIBKD_DISTILL_MODELS_INTERNAL_KWARGS_UTIL_H_

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/kwargs.h"
#include "base/registry.h"

namespace kd {
namespace models_internal {

// The kwargs several models share.
inline KwargSpec NumClassesSpec() {
  return {.name = "num_classes",
          .type = KwargType::kInteger,
          .doc = "classes, the size of the output logits",
          .default_value = 10,
          .min = 1};
}
// num_classes with torchvision's ImageNet default, 1000.
inline KwargSpec ImageNetClassesSpec() {
  KwargSpec classes = NumClassesSpec();
  classes.default_value = 1000;
  return classes;
}
inline KwargSpec InChannelsSpec(int64_t default_channels) {
  return {.name = "in_channels",
          .type = KwargType::kInteger,
          .doc = "channels of the input images",
          .default_value = default_channels,
          .min = 1};
}
inline KwargSpec DropoutSpec(absl::string_view where) {
  return {.name = "dropout",
          .type = KwargType::kNumber,
          .doc = absl::StrCat("dropout probability ", where, " (0: none)"),
          .default_value = 0.0,
          .min = 0,
          .max = 1,
          .max_exclusive = true};
}

// DropoutSpec with the model's own default probability.
inline KwargSpec DropoutSpec(absl::string_view where, double default_p) {
  KwargSpec dropout = DropoutSpec(where);
  dropout.default_value = default_p;
  return dropout;
}

}  // namespace models_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_MODELS_INTERNAL_KWARGS_UTIL_H_
