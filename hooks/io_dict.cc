#include "hooks/io_dict.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include <ATen/core/Dict.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/nearest.h"

namespace kd {

namespace {

int Slot(absl::string_view io_type) {
  if (io_type == kInput) return 0;
  if (io_type == kOutput) return 1;
  return -1;
}

}  // namespace

c10::IValue& IoEntry::operator[](absl::string_view io_type) {
  const int slot = Slot(io_type);
  if (slot < 0) {
    throw std::invalid_argument(absl::StrCat("unknown io type \"", io_type,
                                             "\"; valid: input, output"));
  }
  has_[slot] = true;
  return values_[slot];
}

const c10::IValue& IoEntry::at(absl::string_view io_type) const {
  const int slot = Slot(io_type);
  if (slot < 0 || !has_[slot]) {
    throw std::out_of_range(absl::StrCat("no \"", io_type, "\" in this I/O dict entry"));
  }
  return values_[slot];
}

size_t IoEntry::count(absl::string_view io_type) const {
  const int slot = Slot(io_type);
  return slot >= 0 && has_[slot] ? 1 : 0;
}

namespace {

template <typename Entries>
auto LowerBound(Entries& entries, absl::string_view path) {
  return std::lower_bound(entries.begin(), entries.end(), path,
                          [](const auto& entry, absl::string_view p) { return entry.first < p; });
}

}  // namespace

IoEntry& IoDict::operator[](absl::string_view path) {
  auto it = LowerBound(entries_, path);
  if (it == entries_.end() || it->first != path) {
    it = entries_.emplace(it, std::string(path), IoEntry());
  }
  return it->second;
}

IoEntry& IoDict::Append(std::string path) {
  if (!entries_.empty() && !(entries_.back().first < path)) {
    throw std::invalid_argument(absl::StrCat("IoDict::Append(", QuoteName(path),
                                             ") out of order after ",
                                             QuoteName(entries_.back().first)));
  }
  return entries_.emplace_back(std::move(path), IoEntry()).second;
}

const IoEntry& IoDict::at(absl::string_view path) const {
  auto it = find(path);
  if (it == end()) {
    throw std::out_of_range(absl::StrCat("no module ", QuoteName(path), " in this I/O dict"));
  }
  return it->second;
}

IoDict::const_iterator IoDict::find(absl::string_view path) const {
  auto it = LowerBound(entries_, path);
  return it != entries_.end() && it->first == path ? it : entries_.end();
}

absl::StatusOr<c10::IValue> GetIo(const IoDict& io, absl::string_view path,
                                  absl::string_view io_type) {
  auto it = io.find(path);
  if (it == io.end()) {
    std::vector<std::string> paths;
    for (const auto& [p, entry] : io) paths.push_back(p);
    return absl::NotFoundError(absl::StrCat("no I/O recorded for module ", QuoteName(path),
                                            "; ", Suggest(path, paths)));
  }
  if (it->second.count(io_type) == 0) {
    std::vector<std::string> types;
    for (const auto& [t, v] : it->second) types.push_back(std::string(t));
    return absl::NotFoundError(absl::StrCat(
        "no \"", io_type, "\" recorded for module ", QuoteName(path), " (recorded: ",
        types.empty() ? "nothing; did a forward run since the last pop?"
                      : absl::StrJoin(types, ", "),
        ")"));
  }
  return it->second.at(io_type);
}

c10::IValue IoDictToIValue(const IoDict& io) {
  c10::impl::GenericDict outer(c10::StringType::get(), c10::AnyType::get());
  for (const auto& [path, entry] : io) {
    c10::impl::GenericDict inner(c10::StringType::get(), c10::AnyType::get());
    for (const auto& [io_type, value] : entry) inner.insert(std::string(io_type), value);
    outer.insert(path, inner);
  }
  return outer;
}

}  // namespace kd
