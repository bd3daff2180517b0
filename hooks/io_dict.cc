#include "hooks/io_dict.h"

#include <vector>

#include <ATen/core/Dict.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/nearest.h"

namespace kd {

absl::StatusOr<c10::IValue> GetIo(const IoDict& io, absl::string_view path,
                                  absl::string_view io_type) {
  auto it = io.find(std::string(path));
  if (it == io.end()) {
    std::vector<std::string> paths;
    for (const auto& [p, entry] : io) paths.push_back(p);
    return absl::NotFoundError(absl::StrCat("no I/O recorded for module ", QuoteName(path),
                                            "; ", FormatNearest(path, paths)));
  }
  auto value = it->second.find(std::string(io_type));
  if (value == it->second.end()) {
    std::vector<std::string> types;
    for (const auto& [t, v] : it->second) types.push_back(t);
    return absl::NotFoundError(absl::StrCat(
        "no \"", io_type, "\" recorded for module ", QuoteName(path), " (recorded: ",
        types.empty() ? "nothing; did a forward run since the last pop?"
                      : absl::StrJoin(types, ", "),
        ")"));
  }
  return value->second;
}

c10::IValue IoDictToIValue(const IoDict& io) {
  c10::impl::GenericDict outer(c10::StringType::get(), c10::AnyType::get());
  for (const auto& [path, entry] : io) {
    c10::impl::GenericDict inner(c10::StringType::get(), c10::AnyType::get());
    for (const auto& [io_type, value] : entry) inner.insert(io_type, value);
    outer.insert(path, inner);
  }
  return outer;
}

}  // namespace kd
