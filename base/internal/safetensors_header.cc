#include "base/internal/safetensors_header.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/torch_status.h"

namespace kd {
namespace base_internal {
namespace {

using Json = nlohmann::json;

// In the reference writer's enum order (BOOL lowest, U64 highest); the F4, F6 and F8_E8M0
// dtypes of the Rust enum have no libtorch type here and are left out.
constexpr SafetensorsDtype kDtypes[] = {
    {"BOOL", c10::ScalarType::Bool, 1, 0},
    {"U8", c10::ScalarType::Byte, 1, 1},
    {"I8", c10::ScalarType::Char, 1, 2},
    {"F8_E5M2", c10::ScalarType::Float8_e5m2, 1, 3},
    {"F8_E4M3", c10::ScalarType::Float8_e4m3fn, 1, 4},
    {"I16", c10::ScalarType::Short, 2, 5},
    {"U16", c10::ScalarType::UInt16, 2, 6},
    {"F16", c10::ScalarType::Half, 2, 7},
    {"BF16", c10::ScalarType::BFloat16, 2, 8},
    {"I32", c10::ScalarType::Int, 4, 9},
    {"U32", c10::ScalarType::UInt32, 4, 10},
    {"F32", c10::ScalarType::Float, 4, 11},
    {"C64", c10::ScalarType::ComplexFloat, 8, 12},
    {"F64", c10::ScalarType::Double, 8, 13},
    {"I64", c10::ScalarType::Long, 8, 14},
    {"U64", c10::ScalarType::UInt64, 8, 15},
};

// Dims beyond any model's; a bound on the work a hostile header can ask for.
constexpr size_t kMaxDims = 64;

// `value` for a message: its JSON, cut to a line.
std::string Brief(const Json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = absl::StrCat(text.substr(0, 57), "...");
  return text;
}

std::string TensorContext(absl::string_view name) {
  return absl::StrCat("tensor ", QuoteName(name), ": ");
}

std::optional<uint64_t> AsUnsigned(const Json& value) {
  if (!value.is_number_unsigned()) return std::nullopt;
  return value.get<uint64_t>();
}

absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& name, const Json& entry,
                                            int64_t buffer_bytes) {
  const std::string context = TensorContext(name);
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
      !entry.contains("data_offsets")) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, "its entry must be an object with \"dtype\", \"shape\" and \"data_offsets\", not ",
        Brief(entry), "; the header is not a safetensors header"));
  }
  SafetensorsEntry out;
  out.name = name;
  const Json& dtype = entry["dtype"];
  out.dtype = dtype.is_string() ? FindSafetensorsDtype(dtype.get<std::string>()) : nullptr;
  if (out.dtype == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(context, "unknown dtype ", Brief(dtype),
                                                   "; the dtypes libkd reads are ",
                                                   KnownSafetensorsDtypes()));
  }
  const Json& shape = entry["shape"];
  const bool dims_ok = shape.is_array() && std::all_of(shape.begin(), shape.end(), [](auto& d) {
                         return AsUnsigned(d).value_or(uint64_t{1} << 63) < (uint64_t{1} << 63);
                       });
  if (!dims_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, "\"shape\" must be a list of non-negative integers, not ", Brief(shape)));
  }
  if (shape.size() > kMaxDims) {
    return absl::InvalidArgumentError(absl::StrCat(context, "its shape has ", shape.size(),
                                                   " dims; libkd reads at most ", kMaxDims));
  }
  // The bytes of the shape, and of its non-zero dims, must fit in int64: libtorch computes them.
  int64_t bytes = out.dtype->itemsize;
  int64_t nonzero_bytes = out.dtype->itemsize;
  for (const Json& d : shape) {
    const int64_t dim = static_cast<int64_t>(d.get<uint64_t>());
    out.shape.push_back(dim);
    if (dim != 0 && __builtin_mul_overflow(nonzero_bytes, dim, &nonzero_bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          context, "shape ", Brief(shape), " of ", out.dtype->name, " holds more than 2^63 bytes"));
    }
    bytes = dim == 0 ? 0 : bytes * dim;  // no overflow: |bytes| <= nonzero_bytes
  }
  const Json& offsets = entry["data_offsets"];
  std::optional<uint64_t> begin, end;
  if (offsets.is_array() && offsets.size() == 2) {
    begin = AsUnsigned(offsets[0]);
    end = AsUnsigned(offsets[1]);
  }
  if (!begin || !end || *begin > *end) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, "\"data_offsets\" must be two integers [begin, end] with 0 <= begin <= end, not ",
        Brief(offsets)));
  }
  if (*end > static_cast<uint64_t>(buffer_bytes)) {
    return absl::DataLossError(absl::StrCat(
        context, "data_offsets ", Brief(offsets), " end past the data buffer's ", buffer_bytes,
        " bytes: the file is cut short or its header is wrong; download or save it again"));
  }
  out.begin = static_cast<int64_t>(*begin);
  out.end = static_cast<int64_t>(*end);
  if (out.end - out.begin != bytes) {
    return absl::DataLossError(
        absl::StrCat(context, "data_offsets ", Brief(offsets), " hold ", out.end - out.begin,
                     " bytes but ", out.dtype->name, " of shape ", ShapeString(out.shape),
                     " needs ", bytes, "; the header is wrong: download or save the file again"));
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> ParseMetadata(const Json& metadata) {
  std::map<std::string, std::string> out;
  if (metadata.is_null()) return out;
  if (!metadata.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"__metadata__\" must be an object of strings, not ", Brief(metadata)));
  }
  for (const auto& [key, value] : metadata.items()) {
    if (!value.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"__metadata__\" must map strings to strings, but ", QuoteName(key), " is ",
                       Brief(value), "; write the value as a string"));
    }
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

// The tensors, sorted by position, must cover the buffer exactly: each begins where the one
// before it ended (the reference reader's rule), and the last ends where the buffer does.
absl::Status CheckCoverage(const std::vector<SafetensorsEntry>& tensors, int64_t buffer_bytes) {
  int64_t covered = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry& t : tensors) {
    if (t.begin < covered) {
      return absl::DataLossError(
          absl::StrCat("tensors ", QuoteName(previous->name), " [", previous->begin, ", ",
                       previous->end, ") and ", QuoteName(t.name), " [", t.begin, ", ", t.end,
                       ") overlap; the header is wrong: download or save the file again"));
    }
    if (t.begin > covered) {
      return absl::DataLossError(
          absl::StrCat("bytes [", covered, ", ", t.begin,
                       ") of the data buffer belong to no tensor (before ", QuoteName(t.name),
                       "); safetensors requires the tensors to cover the buffer without "
                       "holes: download or save the file again"));
    }
    covered = t.end;
    previous = &t;
  }
  if (covered != buffer_bytes) {
    return absl::DataLossError(absl::StrCat(
        "the last ", buffer_bytes - covered,
        " bytes of the data buffer belong to no tensor; "
        "safetensors requires the tensors to cover the buffer without holes: download or save "
        "the file again"));
  }
  return absl::OkStatus();
}

}  // namespace

const SafetensorsDtype* FindSafetensorsDtype(absl::string_view name) {
  for (const SafetensorsDtype& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

const SafetensorsDtype* FindSafetensorsDtype(c10::ScalarType type) {
  for (const SafetensorsDtype& d : kDtypes) {
    if (type == d.type) return &d;
  }
  return nullptr;
}

std::string KnownSafetensorsDtypes() {
  return absl::StrJoin(std::begin(kDtypes), std::end(kDtypes), ", ",
                       [](std::string* out, const SafetensorsDtype& d) { out->append(d.name); });
}

absl::StatusOr<SafetensorsLayout> ParseSafetensorsHeader(absl::string_view header,
                                                         int64_t buffer_bytes) {
  // nlohmann keeps the last of a repeated key; the callback notes the first repetition, in any
  // object (a name written twice, or "dtype" twice in one entry).
  std::vector<std::set<std::string>> open_objects;
  std::optional<std::string> repeated;
  bool repeated_at_top = false;
  const Json::parser_callback_t note_repeats = [&](int, Json::parse_event_t event, Json& value) {
    if (event == Json::parse_event_t::object_start) open_objects.emplace_back();
    if (event == Json::parse_event_t::object_end) open_objects.pop_back();
    if (event == Json::parse_event_t::key && !repeated &&
        !open_objects.back().insert(value.get<std::string>()).second) {
      repeated = value.get<std::string>();
      repeated_at_top = open_objects.size() == 1;
    }
    return true;
  };
  absl::StatusOr<Json> parsed =
      CallTorch("the header is not JSON", absl::StatusCode::kInvalidArgument,
                [&] { return Json::parse(header.begin(), header.end(), note_repeats); });
  if (!parsed.ok()) return parsed.status();
  const Json& json = *parsed;
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the header is JSON but not an object: ", Brief(json), "; not a safetensors file"));
  }
  if (repeated) {
    return absl::InvalidArgumentError(
        repeated_at_top
            ? absl::StrCat("tensor ", QuoteName(*repeated),
                           " is in the header twice; a name may appear once: save the file again")
            : absl::StrCat("key ", QuoteName(*repeated),
                           " is twice in one object of the header; save the file again"));
  }
  SafetensorsLayout layout;
  for (const auto& [name, value] : json.items()) {
    if (name == "__metadata__") {
      KD_ASSIGN_OR_RETURN(layout.metadata, ParseMetadata(value));
      continue;
    }
    KD_ASSIGN_OR_RETURN(SafetensorsEntry entry, ParseEntry(name, value, buffer_bytes));
    layout.tensors.push_back(std::move(entry));
  }
  std::sort(layout.tensors.begin(), layout.tensors.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
            });
  KD_RETURN_IF_ERROR(CheckCoverage(layout.tensors, buffer_bytes));
  return layout;
}

absl::StatusOr<std::vector<const SafetensorsDtype*>> CheckTensorsToWrite(
    const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  std::vector<const SafetensorsDtype*> dtypes;
  std::set<absl::string_view> names;
  for (const auto& [name, tensor] : tensors) {
    const std::string context = TensorContext(name);
    if (name == "__metadata__" || !names.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(context,
                       name == "__metadata__" ? "the name is safetensors' key for the metadata"
                                              : "the name is given twice",
                       "; give each tensor a name of its own"));
    }
    if (!tensor.defined() || tensor.layout() != c10::kStrided) {
      return absl::InvalidArgumentError(absl::StrCat(
          context, tensor.defined() ? "is not dense (its layout is not strided)" : "is undefined",
          "; safetensors holds dense tensors: give a dense tensor"));
    }
    if (absl::Status utf8 =
            JsonString(name, absl::StrCat("tensor name ", QuoteName(name))).status();
        !utf8.ok()) {
      return utf8;
    }
    dtypes.push_back(FindSafetensorsDtype(tensor.scalar_type()));
    if (dtypes.back() == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          context, "dtype ", c10::toString(tensor.scalar_type()),
          " has no safetensors name; convert it to one of ", KnownSafetensorsDtypes()));
    }
  }
  return dtypes;
}

absl::StatusOr<std::string> JsonString(absl::string_view text, absl::string_view what) {
  return CallTorch(absl::StrCat(what, " is not UTF-8 text"), absl::StatusCode::kInvalidArgument,
                   [&] { return Json(std::string(text)).dump(); });
}

std::string QuoteName(absl::string_view name) {
  if (name.size() > 200) {
    return absl::StrCat("\"", absl::Utf8SafeCEscape(name.substr(0, 200)), "...\"");
  }
  return absl::StrCat("\"", absl::Utf8SafeCEscape(name), "\"");
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace base_internal
}  // namespace kd
