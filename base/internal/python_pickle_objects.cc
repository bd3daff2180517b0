#include "base/internal/python_pickle_objects.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/Dict.h>
#include <ATen/core/List.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kd {
namespace base_internal {
namespace {

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

}  // namespace

absl::StatusOr<absl::string_view> Operands::Take(uint64_t n) {
  if (!reader_.Has(pos_, n)) return absl::InvalidArgumentError("it runs past the pickle");
  absl::string_view out = reader_.Slice(pos_, n);
  pos_ += n;
  return out;
}

absl::StatusOr<uint64_t> Operands::Unsigned(int n) {
  if (!reader_.Has(pos_, n)) return absl::InvalidArgumentError("it runs past the pickle");
  const uint64_t v = reader_.Le(pos_, n);
  pos_ += n;
  return v;
}

absl::StatusOr<int64_t> Operands::Long(uint64_t n) {
  if (n > 8) return absl::InvalidArgumentError(absl::StrCat("an integer of ", n, " bytes"));
  absl::StatusOr<uint64_t> v = Unsigned(static_cast<int>(n));
  if (!v.ok()) return v.status();
  if (n > 0 && n < 8 && (*v >> (8 * n - 1)) & 1) *v |= ~uint64_t{0} << (8 * n);  // negative
  return static_cast<int64_t>(*v);
}

absl::StatusOr<std::string> Operands::Line() {
  const absl::string_view rest = reader_.Slice(pos_, reader_.size() - pos_);
  const size_t end = rest.find('\n');
  if (end == absl::string_view::npos || end > 256) {
    return absl::InvalidArgumentError("a GLOBAL name without its end");
  }
  pos_ += end + 1;
  return std::string(rest.substr(0, end));
}

// callable(*args) for the callables torch.save writes; any other makes None (no code runs).
absl::StatusOr<c10::IValue> CallGlobal(const std::string& f, const std::vector<c10::IValue>& args) {
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

absl::StatusOr<at::Tensor> StorageReader::Read(const std::vector<c10::IValue>& e) {
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

}  // namespace base_internal
}  // namespace kd
