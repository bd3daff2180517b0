// The I/O dict: what forward hooks record, by module path and "input"/"output".
//
//   IoDict io = *manager.PopIoDict();
//   KD_ASSIGN_OR_RETURN(c10::IValue feats, GetIo(io, "layer2", "output"));
//
// io["layer2"]["output"] reads like torchdistill's dict of dicts; GetIo is the checked read
// that names a mistyped path or io type (operator[] inserts it, as std::map does).
//
// Values follow torchdistill: a module's positional input with a single argument unwrapped, its
// output (a one-element tuple unwrapped), a list of those in call order with `accumulates`, or
// one stacked tensor with `stacks_accumulated`.
#ifndef LIBKD_HOOKS_IO_DICT_H_
#define LIBKD_HOOKS_IO_DICT_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kd {

class ForwardHookManager;

inline constexpr char kInput[] = "input";
inline constexpr char kOutput[] = "output";

// What one module recorded: its "input" and/or its "output". Reads like a map of io type to
// value (entry["output"], entry.count("input"), `for (const auto& [io_type, value] : entry)`),
// without one: a pop builds one per hooked module, and a hooked call must stay cheap.
class IoEntry {
 public:
  // The value of `io_type`, inserted as None if absent (as std::map's operator[] does).
  // Throws std::invalid_argument for an io type other than "input" and "output".
  c10::IValue& operator[](absl::string_view io_type);
  // The value of `io_type`; throws std::out_of_range if it was not recorded.
  const c10::IValue& at(absl::string_view io_type) const;
  // 1 if `io_type` was recorded, else 0.
  size_t count(absl::string_view io_type) const;
  size_t size() const { return has_[0] + has_[1]; }
  bool empty() const { return size() == 0; }

  // (io type, value) for what was recorded, input first.
  class const_iterator {
   public:
    using value_type = std::pair<absl::string_view, const c10::IValue&>;
    using difference_type = std::ptrdiff_t;
    const_iterator(const IoEntry* entry, int slot) : entry_(entry), slot_(slot) { Skip(); }
    value_type operator*() const { return {slot_ == 0 ? kInput : kOutput, entry_->values_[slot_]}; }
    const_iterator& operator++() {
      ++slot_;
      Skip();
      return *this;
    }
    bool operator==(const const_iterator& other) const { return slot_ == other.slot_; }
    bool operator!=(const const_iterator& other) const { return slot_ != other.slot_; }

   private:
    void Skip() {
      while (slot_ < 2 && !entry_->has_[slot_]) ++slot_;
    }
    const IoEntry* entry_;
    int slot_;
  };
  const_iterator begin() const { return const_iterator(this, 0); }
  const_iterator end() const { return const_iterator(this, 2); }

 private:
  friend class ForwardHookManager;  // fills entries without looking up io types

  c10::IValue values_[2];  // input, output
  bool has_[2] = {false, false};
};

// What forward hooks recorded, by module path (or I/O dict key), in path order: io[path] is an
// IoEntry. A small sorted map (std::map's calls: operator[], at, find, count, iteration).
class IoDict {
 public:
  using value_type = std::pair<std::string, IoEntry>;
  using iterator = std::vector<value_type>::iterator;
  using const_iterator = std::vector<value_type>::const_iterator;

  // The entry of `path`, inserted empty if absent.
  IoEntry& operator[](absl::string_view path);
  // The entry of `path`; throws std::out_of_range if absent (GetIo says what is there).
  const IoEntry& at(absl::string_view path) const;
  const_iterator find(absl::string_view path) const;
  size_t count(absl::string_view path) const { return find(path) != end() ? 1 : 0; }
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  void reserve(size_t n) { entries_.reserve(n); }
  // Adds the entry of `path`, which must sort after every path present (a builder's fast
  // path: no search, no shifting). Throws std::invalid_argument otherwise.
  IoEntry& Append(std::string path);
  void clear() { entries_.clear(); }

  iterator begin() { return entries_.begin(); }
  iterator end() { return entries_.end(); }
  const_iterator begin() const { return entries_.begin(); }
  const_iterator end() const { return entries_.end(); }

 private:
  friend class ForwardHookManager;  // appends its sorted keys unchecked

  std::vector<value_type> entries_;  // sorted by path
};

// io[path][io_type], or NotFound naming what is missing and the nearest recorded paths.
absl::StatusOr<c10::IValue> GetIo(const IoDict& io, absl::string_view path,
                                  absl::string_view io_type);

// The dict as an IValue (Dict[str, Dict[str, Any]]): kd::WriteTorchFile writes it so that
// Python's torch.load returns {path: {"input": ..., "output": ...}}.
c10::IValue IoDictToIValue(const IoDict& io);

}  // namespace kd

#endif  // LIBKD_HOOKS_IO_DICT_H_
