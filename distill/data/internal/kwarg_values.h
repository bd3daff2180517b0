// Kwarg access for the dataset factories: the registration's contract has checked the types,
// so these only supply defaults. (kd::NumberKwarg / StringKwarg in distill/losses/loss.h do the
// same for losses; the data package does not depend on the losses.)
#ifndef LIBKD_DISTILL_DATA_INTERNAL_KWARG_VALUES_H_
#define LIBKD_DISTILL_DATA_INTERNAL_KWARG_VALUES_H_

#include <cstdint>
#include <string>

#include "base/ivalue_util.h"

namespace kd {
namespace data_internal {

inline const c10::IValue* FindKwarg(const Kwargs& kwargs, const std::string& name) {
  auto it = kwargs.find(name);
  return it == kwargs.end() || it->second.isNone() ? nullptr : &it->second;
}

inline double NumberValue(const Kwargs& kwargs, const std::string& name, double fallback) {
  const c10::IValue* v = FindKwarg(kwargs, name);
  if (v == nullptr) return fallback;
  return v->isInt() ? static_cast<double>(v->toInt()) : v->toDouble();
}

inline int64_t IntValue(const Kwargs& kwargs, const std::string& name, int64_t fallback) {
  const c10::IValue* v = FindKwarg(kwargs, name);
  return v == nullptr ? fallback : v->toInt();
}

inline bool BoolValue(const Kwargs& kwargs, const std::string& name, bool fallback) {
  const c10::IValue* v = FindKwarg(kwargs, name);
  return v == nullptr ? fallback : v->toBool();
}

inline std::string StringValue(const Kwargs& kwargs, const std::string& name,
                               const std::string& fallback) {
  const c10::IValue* v = FindKwarg(kwargs, name);
  return v == nullptr ? fallback : v->toStringRef();
}

}  // namespace data_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_DATA_INTERNAL_KWARG_VALUES_H_
