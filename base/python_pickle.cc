#include "base/python_pickle.h"

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/Dict.h>
#include <ATen/core/List.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/internal/python_pickle_objects.h"
#include "base/status_macros.h"

namespace kd {
namespace {

// What the pickle machine's stack holds: a value, a MARK, a class or function named by GLOBAL
// (kept by name: nothing is imported or called).
struct Item {
  enum class Kind { kValue, kMark, kGlobal };
  Kind kind = Kind::kValue;
  c10::IValue value;
  std::string global;  // "module.name"
};

absl::Status Bad(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("cannot read its pickle: ", why));
}

class Unpickler {
 public:
  Unpickler(absl::string_view bytes, const TorchArchive& archive, absl::string_view pickle)
      : in_(pickle), storages_(bytes, archive) {}

  absl::StatusOr<c10::IValue> Run() {
    while (!in_.done()) {
      const size_t at = in_.pos();
      KD_ASSIGN_OR_RETURN(const uint64_t op, in_.Unsigned(1));
      if (op == '.') {  // STOP
        if (stack_.size() != 1 || stack_.back().kind != Item::Kind::kValue) {
          return Bad("it ends without one value on its stack");
        }
        return stack_.back().value;
      }
      absl::Status done = Step(op);
      if (!done.ok()) {
        return Bad(absl::StrCat("opcode 0x", absl::Hex(op), " at offset ", at, ": ",
                                done.message()));
      }
      if (stack_.size() > kMaxStack) return Bad("its stack grows past 1,000,000 entries");
    }
    return Bad("it has no STOP opcode");
  }

 private:
  static constexpr size_t kMaxStack = 1000000;
  static constexpr size_t kMaxMemo = 10000000;

  absl::Status Step(uint8_t op) {
    switch (op) {
      case 0x80:  // PROTO
        return in_.Take(1).status();
      case 0x95:  // FRAME
        return in_.Take(8).status();
      case '(':
        stack_.push_back({.kind = Item::Kind::kMark});
        return absl::OkStatus();
      case ')':
        return Push(c10::ivalue::Tuple::create({}));
      case ']':
        return Push(c10::impl::GenericList(c10::AnyType::get()));
      case '}':
        return Push(c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get()));
      case 'N':
        return Push(c10::IValue());
      case 0x88:
        return Push(true);
      case 0x89:
        return Push(false);
      case 'K': {
        KD_ASSIGN_OR_RETURN(uint64_t v, in_.Unsigned(1));
        return Push(static_cast<int64_t>(v));
      }
      case 'M': {
        KD_ASSIGN_OR_RETURN(uint64_t v, in_.Unsigned(2));
        return Push(static_cast<int64_t>(v));
      }
      case 'J': {
        KD_ASSIGN_OR_RETURN(uint64_t v, in_.Unsigned(4));
        return Push(static_cast<int64_t>(static_cast<int32_t>(static_cast<uint32_t>(v))));
      }
      case 0x8a: {  // LONG1
        KD_ASSIGN_OR_RETURN(uint64_t n, in_.Unsigned(1));
        KD_ASSIGN_OR_RETURN(int64_t v, in_.Long(n));
        return Push(v);
      }
      case 0x8b: {  // LONG4
        KD_ASSIGN_OR_RETURN(uint64_t n, in_.Unsigned(4));
        KD_ASSIGN_OR_RETURN(int64_t v, in_.Long(n));
        return Push(v);
      }
      case 'G': {  // BINFLOAT, big-endian
        KD_ASSIGN_OR_RETURN(absl::string_view raw, in_.Take(8));
        uint64_t bits = 0;
        for (char c : raw) bits = (bits << 8) | static_cast<uint8_t>(c);
        double v;
        std::memcpy(&v, &bits, sizeof(v));
        return Push(v);
      }
      case 'X':  // BINUNICODE
      case 'T':  // BINSTRING
      case 'B':  // BINBYTES
        return PushString(4);
      case 0x8c:  // SHORT_BINUNICODE
      case 'U':   // SHORT_BINSTRING
      case 'C':   // SHORT_BINBYTES
        return PushString(1);
      case 0x8d:  // BINUNICODE8
      case 0x8e:  // BINBYTES8
        return PushString(8);
      case 'q': {
        KD_ASSIGN_OR_RETURN(uint64_t i, in_.Unsigned(1));
        return Put(i);
      }
      case 'r': {
        KD_ASSIGN_OR_RETURN(uint64_t i, in_.Unsigned(4));
        return Put(i);
      }
      case 0x94:  // MEMOIZE
        return Put(memo_.size());
      case 'h': {
        KD_ASSIGN_OR_RETURN(uint64_t i, in_.Unsigned(1));
        return Get(i);
      }
      case 'j': {
        KD_ASSIGN_OR_RETURN(uint64_t i, in_.Unsigned(4));
        return Get(i);
      }
      case '0':  // POP
        return Pop().status();
      case '1': {  // POP_MARK
        KD_ASSIGN_OR_RETURN(std::vector<Item> items, PopToMark());
        return absl::OkStatus();
      }
      case '2': {  // DUP
        if (stack_.empty()) return absl::InvalidArgumentError("DUP on an empty stack");
        stack_.push_back(stack_.back());
        return absl::OkStatus();
      }
      case 't': {
        KD_ASSIGN_OR_RETURN(std::vector<Item> items, PopToMark());
        return MakeTuple(std::move(items));
      }
      case 0x85:
      case 0x86:
      case 0x87: {
        const size_t n = op - 0x84;
        if (stack_.size() < n) return absl::InvalidArgumentError("TUPLE of too few values");
        std::vector<Item> items(stack_.end() - n, stack_.end());
        stack_.resize(stack_.size() - n);
        return MakeTuple(std::move(items));
      }
      case 'l': {  // LIST
        KD_ASSIGN_OR_RETURN(std::vector<Item> items, PopToMark());
        stack_.push_back({.value = c10::impl::GenericList(c10::AnyType::get())});
        return Append(std::move(items));
      }
      case 'd': {  // DICT
        KD_ASSIGN_OR_RETURN(std::vector<Item> items, PopToMark());
        stack_.push_back({.value = c10::impl::GenericDict(c10::AnyType::get(),
                                                          c10::AnyType::get())});
        return SetItems(std::move(items));
      }
      case 'a': {  // APPEND
        KD_ASSIGN_OR_RETURN(Item item, Pop());
        std::vector<Item> items;
        items.push_back(std::move(item));
        return Append(std::move(items));
      }
      case 'e': {  // APPENDS
        KD_ASSIGN_OR_RETURN(std::vector<Item> items, PopToMark());
        return Append(std::move(items));
      }
      case 's': {  // SETITEM
        if (stack_.size() < 3) return absl::InvalidArgumentError("SETITEM without a dict");
        std::vector<Item> items(stack_.end() - 2, stack_.end());
        stack_.resize(stack_.size() - 2);
        return SetItems(std::move(items));
      }
      case 'u': {  // SETITEMS
        KD_ASSIGN_OR_RETURN(std::vector<Item> items, PopToMark());
        return SetItems(std::move(items));
      }
      case 'c': {  // GLOBAL: "module\nname\n"
        KD_ASSIGN_OR_RETURN(std::string module, in_.Line());
        KD_ASSIGN_OR_RETURN(std::string name, in_.Line());
        stack_.push_back({.kind = Item::Kind::kGlobal, .global = absl::StrCat(module, ".", name)});
        return absl::OkStatus();
      }
      case 0x93: {  // STACK_GLOBAL
        KD_ASSIGN_OR_RETURN(Item name, Pop());
        KD_ASSIGN_OR_RETURN(Item module, Pop());
        if (!name.value.isString() || !module.value.isString()) {
          return absl::InvalidArgumentError("STACK_GLOBAL of something other than two strings");
        }
        stack_.push_back({.kind = Item::Kind::kGlobal,
                          .global = absl::StrCat(module.value.toStringRef(), ".",
                                                 name.value.toStringRef())});
        return absl::OkStatus();
      }
      case 'R': {  // REDUCE
        KD_ASSIGN_OR_RETURN(Item args, Pop());
        KD_ASSIGN_OR_RETURN(Item callable, Pop());
        KD_ASSIGN_OR_RETURN(c10::IValue made, Reduce(callable, std::move(args)));
        return Push(std::move(made));
      }
      case 0x81: {  // NEWOBJ: cls.__new__(cls, *args)
        KD_ASSIGN_OR_RETURN(Item args, Pop());
        KD_ASSIGN_OR_RETURN(Item cls, Pop());
        if (cls.kind == Item::Kind::kGlobal && cls.global == "collections.OrderedDict") {
          return Push(c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get()));
        }
        return Push(c10::IValue());  // an object of another class: not built
      }
      case 'b': {  // BUILD: the state of the object below; objects are not built, dicts keep
                   // their items (an OrderedDict's state is its _metadata)
        KD_ASSIGN_OR_RETURN(Item state, Pop());
        if (stack_.empty()) return absl::InvalidArgumentError("BUILD without an object");
        return absl::OkStatus();
      }
      case 'Q': {  // BINPERSID: a storage of the archive
        KD_ASSIGN_OR_RETURN(Item id, Pop());
        KD_ASSIGN_OR_RETURN(at::Tensor storage, Storage(id));
        return Push(std::move(storage));
      }
      default:
        return absl::InvalidArgumentError("an opcode torch.save does not write");
    }
  }

  // A string of a `width`-byte length (BINUNICODE and its kin; bytes as strings).
  absl::Status PushString(int width) {
    KD_ASSIGN_OR_RETURN(uint64_t n, in_.Unsigned(width));
    KD_ASSIGN_OR_RETURN(absl::string_view text, in_.Take(n));
    return Push(std::string(text));
  }

  absl::Status Push(c10::IValue value) {
    stack_.push_back({.value = std::move(value)});
    return absl::OkStatus();
  }

  absl::StatusOr<Item> Pop() {
    if (stack_.empty() || stack_.back().kind == Item::Kind::kMark) {
      return absl::InvalidArgumentError("a value is taken from an empty stack");
    }
    Item item = std::move(stack_.back());
    stack_.pop_back();
    return item;
  }

  absl::StatusOr<std::vector<Item>> PopToMark() {
    size_t mark = stack_.size();
    while (mark > 0 && stack_[mark - 1].kind != Item::Kind::kMark) --mark;
    if (mark == 0) return absl::InvalidArgumentError("no MARK on the stack");
    std::vector<Item> items(std::make_move_iterator(stack_.begin() + mark),
                            std::make_move_iterator(stack_.end()));
    stack_.resize(mark - 1);
    return items;
  }

  absl::Status Put(uint64_t index) {
    if (stack_.empty()) return absl::InvalidArgumentError("a memo entry of an empty stack");
    if (index >= kMaxMemo) return absl::InvalidArgumentError("a memo index past 10,000,000");
    if (index >= memo_.size()) memo_.resize(index + 1);
    memo_[index] = stack_.back();
    return absl::OkStatus();
  }

  absl::Status Get(uint64_t index) {
    if (index >= memo_.size() || !memo_[index].has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("memo entry ", index, " was never stored"));
    }
    stack_.push_back(*memo_[index]);
    return absl::OkStatus();
  }

  // A value where one is needed: a class or function as a value (never called) is None.
  static absl::StatusOr<c10::IValue> AsValue(Item item) {
    if (item.kind == Item::Kind::kMark) return absl::InvalidArgumentError("a MARK as a value");
    return std::move(item.value);
  }

  absl::Status MakeTuple(std::vector<Item> items) {
    std::vector<c10::IValue> values;
    values.reserve(items.size());
    for (Item& item : items) {
      if (item.kind == Item::Kind::kGlobal) {  // a storage class in a persistent id
        values.emplace_back(absl::StrCat("<global ", item.global, ">"));
        continue;
      }
      KD_ASSIGN_OR_RETURN(c10::IValue v, AsValue(std::move(item)));
      values.push_back(std::move(v));
    }
    return Push(c10::ivalue::Tuple::create(std::move(values)));
  }

  absl::Status Append(std::vector<Item> items) {
    if (stack_.empty() || !stack_.back().value.isList()) {
      return absl::InvalidArgumentError("APPEND to something other than a list");
    }
    c10::impl::GenericList list = stack_.back().value.toList();
    for (Item& item : items) {
      KD_ASSIGN_OR_RETURN(c10::IValue v, AsValue(std::move(item)));
      list.push_back(std::move(v));
    }
    return absl::OkStatus();
  }

  absl::Status SetItems(std::vector<Item> items) {
    if (items.size() % 2 != 0) return absl::InvalidArgumentError("a key without its value");
    if (stack_.empty() || !stack_.back().value.isGenericDict()) {
      return absl::InvalidArgumentError("SETITEM on something other than a dict");
    }
    c10::impl::GenericDict dict = stack_.back().value.toGenericDict();
    for (size_t i = 0; i < items.size(); i += 2) {
      KD_ASSIGN_OR_RETURN(c10::IValue key, AsValue(std::move(items[i])));
      KD_ASSIGN_OR_RETURN(c10::IValue value, AsValue(std::move(items[i + 1])));
      if (!key.isString() && !key.isInt() && !key.isDouble() && !key.isBool()) {
        return absl::InvalidArgumentError(
            absl::StrCat("a dict key of type ", key.tagKind(), " (keys are strings or numbers)"));
      }
      dict.insert_or_assign(std::move(key), std::move(value));
    }
    return absl::OkStatus();
  }

  // callable(*args) for the callables torch.save writes (python_pickle_objects.h).
  absl::StatusOr<c10::IValue> Reduce(const Item& callable, Item args_item) {
    if (callable.kind != Item::Kind::kGlobal) {
      return absl::InvalidArgumentError("REDUCE of something that is not a class or function");
    }
    if (!args_item.value.isTuple()) return absl::InvalidArgumentError("REDUCE without a tuple");
    return base_internal::CallGlobal(callable.global,
                                       args_item.value.toTupleRef().elements().vec());
  }

  // ('storage', storage class, key, location, numel): the record data/<key>, each once.
  absl::StatusOr<at::Tensor> Storage(const Item& id) {
    if (!id.value.isTuple()) return absl::InvalidArgumentError("a persistent id not a tuple");
    return storages_.Read(id.value.toTupleRef().elements().vec());
  }

  base_internal::Operands in_;
  std::vector<Item> stack_;
  std::vector<std::optional<Item>> memo_;
  base_internal::StorageReader storages_;
};

}  // namespace

absl::StatusOr<c10::IValue> UnpicklePythonTorchSave(absl::string_view bytes,
                                                    const TorchArchive& archive) {
  for (const TorchArchive::Record& record : archive.records) {
    if (record.name == archive.prefix + "/byteorder" && record.method == 0 &&
        bytes.substr(record.data_offset, record.size) == "big") {
      return absl::InvalidArgumentError("was saved on a big-endian machine");
    }
  }
  for (const TorchArchive::Record& record : archive.records) {
    if (record.name != archive.prefix + "/data.pkl") continue;
    if (record.method != 0) return Bad("its data.pkl is compressed");
    const absl::string_view pickle = bytes.substr(record.data_offset, record.size);
    KD_RETURN_IF_ERROR(CheckPickleBounds(pickle));
    return Unpickler(bytes, archive, pickle).Run();
  }
  return absl::InvalidArgumentError("has no data.pkl");
}

}  // namespace kd
