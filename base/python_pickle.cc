#include "base/python_pickle.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/Dict.h>
#include <ATen/core/List.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
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

// The dtype of a storage class (torch.FloatStorage -> Float).
std::optional<c10::ScalarType> StorageType(const std::string& global) {
  static const std::map<std::string, c10::ScalarType>* types =
      new std::map<std::string, c10::ScalarType>{
          {"torch.FloatStorage", c10::kFloat},      {"torch.DoubleStorage", c10::kDouble},
          {"torch.HalfStorage", c10::kHalf},        {"torch.BFloat16Storage", c10::kBFloat16},
          {"torch.LongStorage", c10::kLong},        {"torch.IntStorage", c10::kInt},
          {"torch.ShortStorage", c10::kShort},      {"torch.CharStorage", c10::kChar},
          {"torch.ByteStorage", c10::kByte},        {"torch.BoolStorage", c10::kBool},
          {"torch.ComplexFloatStorage", c10::kComplexFloat},
          {"torch.ComplexDoubleStorage", c10::kComplexDouble},
      };
  auto it = types->find(global);
  if (it == types->end()) return std::nullopt;
  return it->second;
}

absl::Status Bad(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("cannot read its pickle: ", why));
}

class Unpickler {
 public:
  Unpickler(absl::string_view bytes, const TorchArchive& archive, absl::string_view pickle)
      : bytes_(bytes), archive_(archive), pickle_(pickle) {}

  absl::StatusOr<c10::IValue> Run() {
    while (pos_ < pickle_.size()) {
      const size_t at = pos_;
      const uint8_t op = static_cast<uint8_t>(pickle_[pos_++]);
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
        return Skip(1);
      case 0x95:  // FRAME
        return Skip(8);
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
        KD_ASSIGN_OR_RETURN(uint64_t v, Unsigned(1));
        return Push(static_cast<int64_t>(v));
      }
      case 'M': {
        KD_ASSIGN_OR_RETURN(uint64_t v, Unsigned(2));
        return Push(static_cast<int64_t>(v));
      }
      case 'J': {
        KD_ASSIGN_OR_RETURN(uint64_t v, Unsigned(4));
        return Push(static_cast<int64_t>(static_cast<int32_t>(static_cast<uint32_t>(v))));
      }
      case 0x8a: {  // LONG1
        KD_ASSIGN_OR_RETURN(uint64_t n, Unsigned(1));
        return Long(n);
      }
      case 0x8b: {  // LONG4
        KD_ASSIGN_OR_RETURN(uint64_t n, Unsigned(4));
        return Long(n);
      }
      case 'G': {  // BINFLOAT, big-endian
        KD_ASSIGN_OR_RETURN(absl::string_view raw, Take(8));
        uint64_t bits = 0;
        for (char c : raw) bits = (bits << 8) | static_cast<uint8_t>(c);
        double v;
        std::memcpy(&v, &bits, sizeof(v));
        return Push(v);
      }
      case 'X':  // BINUNICODE
      case 'T':  // BINSTRING
      case 'B':  // BINBYTES
        return String(4);
      case 0x8c:  // SHORT_BINUNICODE
      case 'U':   // SHORT_BINSTRING
      case 'C':   // SHORT_BINBYTES
        return String(1);
      case 0x8d:  // BINUNICODE8
      case 0x8e:  // BINBYTES8
        return String(8);
      case 'q': {
        KD_ASSIGN_OR_RETURN(uint64_t i, Unsigned(1));
        return Put(i);
      }
      case 'r': {
        KD_ASSIGN_OR_RETURN(uint64_t i, Unsigned(4));
        return Put(i);
      }
      case 0x94:  // MEMOIZE
        return Put(memo_.size());
      case 'h': {
        KD_ASSIGN_OR_RETURN(uint64_t i, Unsigned(1));
        return Get(i);
      }
      case 'j': {
        KD_ASSIGN_OR_RETURN(uint64_t i, Unsigned(4));
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
        c10::impl::GenericList list(c10::AnyType::get());
        for (Item& item : items) {
          KD_ASSIGN_OR_RETURN(c10::IValue v, AsValue(std::move(item)));
          list.push_back(std::move(v));
        }
        return Push(std::move(list));
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
        KD_ASSIGN_OR_RETURN(std::string module, Line());
        KD_ASSIGN_OR_RETURN(std::string name, Line());
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

  absl::Status Skip(size_t n) { return Take(n).status(); }

  absl::StatusOr<absl::string_view> Take(uint64_t n) {
    if (n > pickle_.size() - pos_) return absl::InvalidArgumentError("it runs past the pickle");
    absl::string_view out = pickle_.substr(pos_, n);
    pos_ += n;
    return out;
  }

  absl::StatusOr<uint64_t> Unsigned(int n) {
    KD_ASSIGN_OR_RETURN(absl::string_view raw, Take(n));
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(raw[i]);
    return v;
  }

  absl::StatusOr<std::string> Line() {
    const size_t end = pickle_.find('\n', pos_);
    if (end == absl::string_view::npos || end - pos_ > 256) {
      return absl::InvalidArgumentError("a GLOBAL name without its end");
    }
    std::string line(pickle_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return line;
  }

  absl::Status Long(uint64_t n) {
    if (n > 8) return absl::InvalidArgumentError(absl::StrCat("an integer of ", n, " bytes"));
    KD_ASSIGN_OR_RETURN(absl::string_view raw, Take(n));
    uint64_t v = 0;
    for (int i = static_cast<int>(n) - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(raw[i]);
    if (n > 0 && n < 8 && (static_cast<uint8_t>(raw[n - 1]) & 0x80)) v |= ~uint64_t{0} << (8 * n);
    return Push(static_cast<int64_t>(v));
  }

  absl::Status String(int length_bytes) {
    KD_ASSIGN_OR_RETURN(uint64_t n, Unsigned(length_bytes));
    KD_ASSIGN_OR_RETURN(absl::string_view s, Take(n));
    return Push(std::string(s));
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

  // callable(*args), for the callables torch.save writes; any other makes None (no code runs).
  absl::StatusOr<c10::IValue> Reduce(const Item& callable, Item args_item) {
    if (callable.kind != Item::Kind::kGlobal) {
      return absl::InvalidArgumentError("REDUCE of something that is not a class or function");
    }
    if (!args_item.value.isTuple()) return absl::InvalidArgumentError("REDUCE without a tuple");
    const std::vector<c10::IValue> args = args_item.value.toTupleRef().elements().vec();
    const std::string& f = callable.global;
    if (f == "collections.OrderedDict") {
      c10::impl::GenericDict dict(c10::AnyType::get(), c10::AnyType::get());
      if (!args.empty() && args[0].isList()) {  // OrderedDict([(key, value), ...])
        for (const c10::IValue& pair : args[0].toList()) {
          if (!pair.isTuple() || pair.toTupleRef().elements().size() != 2) {
            return absl::InvalidArgumentError("OrderedDict of something other than pairs");
          }
          dict.insert_or_assign(pair.toTupleRef().elements()[0], pair.toTupleRef().elements()[1]);
        }
      }
      return c10::IValue(dict);
    }
    if (f == "torch._utils._rebuild_tensor_v2" || f == "torch._utils._rebuild_tensor") {
      return RebuildTensor(args);
    }
    if (f == "torch._utils._rebuild_parameter" ||
        f == "torch._utils._rebuild_parameter_with_state") {
      if (args.empty() || !args[0].isTensor()) {
        return absl::InvalidArgumentError("a parameter without its tensor");
      }
      return args[0];
    }
    if (f == "_codecs.encode") {  // bytes, as protocol 2 writes them: the latin-1 text
      if (args.empty() || !args[0].isString()) return absl::InvalidArgumentError("bad bytes");
      std::string out;
      const std::string& text = args[0].toStringRef();
      for (size_t i = 0; i < text.size(); ++i) {  // UTF-8 code points below 256 to bytes
        const uint8_t c = static_cast<uint8_t>(text[i]);
        if (c < 0x80) {
          out.push_back(static_cast<char>(c));
        } else if ((c & 0xE0) == 0xC0 && i + 1 < text.size()) {
          out.push_back(static_cast<char>(((c & 0x1F) << 6) | (text[++i] & 0x3F)));
        } else {
          return absl::InvalidArgumentError("bytes beyond latin-1");
        }
      }
      return c10::IValue(out);
    }
    return c10::IValue();  // an object of another class: not built
  }

  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, hooks, ...).
  absl::StatusOr<c10::IValue> RebuildTensor(const std::vector<c10::IValue>& args) {
    if (args.size() < 4 || !args[0].isTensor() || !args[1].isInt() || !args[2].isTuple() ||
        !args[3].isTuple()) {
      return absl::InvalidArgumentError("a tensor without its storage, offset, size and stride");
    }
    const at::Tensor& storage = args[0].toTensor();
    const int64_t offset = args[1].toInt();
    std::vector<int64_t> size, stride;
    for (const c10::IValue& v : args[2].toTupleRef().elements()) {
      if (!v.isInt() || v.toInt() < 0) return absl::InvalidArgumentError("a bad tensor size");
      size.push_back(v.toInt());
    }
    for (const c10::IValue& v : args[3].toTupleRef().elements()) {
      if (!v.isInt() || v.toInt() < 0) return absl::InvalidArgumentError("a bad tensor stride");
      stride.push_back(v.toInt());
    }
    if (size.size() != stride.size() || offset < 0) {
      return absl::InvalidArgumentError("a tensor whose size and stride disagree");
    }
    // The last element it reaches must lie in its storage.
    bool empty = false;
    __int128 last = offset;
    for (size_t i = 0; i < size.size(); ++i) {
      if (size[i] == 0) empty = true;
      last += static_cast<__int128>(size[i] > 0 ? size[i] - 1 : 0) * stride[i];
    }
    if (!empty && last >= storage.numel()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a tensor reaching element ", static_cast<int64_t>(last), " of a storage of ",
          storage.numel()));
    }
    at::Tensor t = at::empty({0}, storage.options());
    t.set_(storage.storage(), offset, size, stride);
    return c10::IValue(t);
  }

  // ('storage', storage class, key, location, numel): the record data/<key>, each once.
  absl::StatusOr<at::Tensor> Storage(const Item& id) {
    if (!id.value.isTuple()) return absl::InvalidArgumentError("a persistent id not a tuple");
    // A copy: indexing the tuple's inline storage past 3 trips gcc's -Warray-bounds at -O2.
    const std::vector<c10::IValue> e = id.value.toTupleRef().elements().vec();
    if (e.size() < 5 || !e[0].isString() || e[0].toStringRef() != "storage" || !e[1].isString() ||
        !e[2].isString() || !e[4].isInt()) {
      return absl::InvalidArgumentError("a persistent id other than a storage's");
    }
    // The class came through MakeTuple as "<global torch.FloatStorage>".
    std::string cls = e[1].toStringRef();
    if (cls.rfind("<global ", 0) == 0 && cls.back() == '>') cls = cls.substr(8, cls.size() - 9);
    const std::optional<c10::ScalarType> dtype = StorageType(cls);
    if (!dtype.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("a storage of class ", cls));
    }
    const std::string& key = e[2].toStringRef();
    if (auto it = storages_.find(key); it != storages_.end()) return it->second;
    const std::string name = absl::StrCat(archive_.prefix, "/data/", key);
    const TorchArchive::Record* record = nullptr;
    for (const TorchArchive::Record& r : archive_.records) {
      if (r.name == name) record = &r;
    }
    if (record == nullptr) return absl::InvalidArgumentError(absl::StrCat("no record ", name));
    if (record->method != 0) {
      return absl::InvalidArgumentError(absl::StrCat("record ", name, " is compressed"));
    }
    const int64_t numel = e[4].toInt();
    const uint64_t item = c10::elementSize(*dtype);
    if (numel < 0 || static_cast<uint64_t>(numel) > record->size / item) {
      return absl::InvalidArgumentError(absl::StrCat("storage ", key, " of ", numel,
                                                     " elements in a record of ", record->size,
                                                     " bytes"));
    }
    at::Tensor storage = at::empty({numel}, at::TensorOptions().dtype(*dtype));
    if (numel > 0) {
      std::memcpy(storage.data_ptr(), bytes_.data() + record->data_offset, numel * item);
    }
    storages_.emplace(key, storage);
    return storage;
  }

  absl::string_view bytes_;
  const TorchArchive& archive_;
  absl::string_view pickle_;
  size_t pos_ = 0;
  std::vector<Item> stack_;
  std::vector<std::optional<Item>> memo_;
  std::map<std::string, at::Tensor> storages_;
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
