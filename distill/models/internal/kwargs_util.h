// The specs of kwargs that several models share, and reading a model's kwargs once
// MakeRegisteredModel has checked them: absent or None kwargs take the fallback (the default
// the spec's doc states).
//
//   const int64_t width = models_internal::IntKwarg(kwargs, "width", 16);
#ifndef LIBKD_DISTILL_MODELS_INTERNAL_KWARGS_UTIL_H_
#define LIBKD_DISTILL_MODELS_INTERNAL_KWARGS_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/ivalue_util.h"
#include "base/registry.h"

namespace kd {
namespace models_internal {

inline const c10::IValue* FindKwarg(const Kwargs& kwargs, const std::string& name) {
  auto it = kwargs.find(name);
  return it == kwargs.end() || it->second.isNone() ? nullptr : &it->second;
}

// An integer kwarg.
inline int64_t IntKwarg(const Kwargs& kwargs, const std::string& name, int64_t fallback) {
  const c10::IValue* value = FindKwarg(kwargs, name);
  return value ? value->toInt() : fallback;
}

// A number kwarg (an integer is converted, as KwargType::kNumber allows).
inline double NumberKwarg(const Kwargs& kwargs, const std::string& name, double fallback) {
  const c10::IValue* value = FindKwarg(kwargs, name);
  if (value == nullptr) return fallback;
  return value->isInt() ? static_cast<double>(value->toInt()) : value->toDouble();
}

// A string kwarg.
inline std::string StringKwarg(const Kwargs& kwargs, const std::string& name,
                               const std::string& fallback) {
  const c10::IValue* value = FindKwarg(kwargs, name);
  return value ? value->toStringRef() : fallback;
}

// An integer-list kwarg.
inline std::vector<int64_t> IntListKwarg(const Kwargs& kwargs, const std::string& name,
                                         std::vector<int64_t> fallback) {
  const c10::IValue* value = FindKwarg(kwargs, name);
  return value ? value->toIntVector() : fallback;
}

// The kwargs several models share.
inline KwargSpec NumClassesSpec() {
  return {.name = "num_classes",
          .type = KwargType::kInteger,
          .doc = "classes, the size of the output logits; 10",
          .min = 1};
}
inline KwargSpec InChannelsSpec(int64_t fallback) {
  return {.name = "in_channels",
          .type = KwargType::kInteger,
          .doc = absl::StrCat("channels of the input images; ", fallback),
          .min = 1};
}
inline KwargSpec DropoutSpec(absl::string_view where) {
  return {.name = "dropout",
          .type = KwargType::kNumber,
          .doc = absl::StrCat("dropout probability ", where, "; 0 (none)"),
          .min = 0,
          .max = 1,
          .max_exclusive = true};
}

}  // namespace models_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_MODELS_INTERNAL_KWARGS_UTIL_H_
