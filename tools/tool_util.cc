#include "tools/tool_util.h"

#include <iostream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/ivalue_util.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"

namespace kd {

int Fail(absl::string_view tool, absl::string_view message) {
  std::string line(message);
  for (char& c : line) {
    if (c == '\n') c = ' ';
  }
  std::cerr << tool << ": " << line << std::endl;
  return 2;
}

std::string LastLine(absl::string_view message) {
  std::vector<absl::string_view> lines =
      absl::StrSplit(message, '\n', absl::SkipWhitespace());
  return lines.empty() ? std::string() : std::string(absl::StripAsciiWhitespace(lines.back()));
}

std::string DescribeValue(const c10::IValue& value) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    std::string dtype(c10::toString(t.scalar_type()));
    // "Float" -> "float32" as Python prints dtypes.
    static const std::vector<std::pair<std::string, std::string>> kNames = {
        {"Float", "float32"}, {"Double", "float64"}, {"Half", "float16"},
        {"BFloat16", "bfloat16"}, {"Long", "int64"}, {"Int", "int32"},
        {"Short", "int16"}, {"Char", "int8"}, {"Byte", "uint8"}, {"Bool", "bool"}};
    for (const auto& [from, to] : kNames) {
      if (dtype == from) dtype = to;
    }
    return absl::StrCat(dtype, ShapeString(t));
  }
  auto join = [](const auto& elements) {
    std::vector<std::string> parts;
    for (const c10::IValue& e : elements) parts.push_back(DescribeValue(e));
    return absl::StrJoin(parts, ", ");
  };
  if (value.isTuple()) return absl::StrCat("(", join(value.toTupleRef().elements()), ")");
  if (value.isList()) return absl::StrCat("[", join(value.toListRef()), "]");
  if (value.isNone()) return "None";
  if (value.isGenericDict()) {
    std::vector<std::string> parts;
    for (const auto& entry : value.toGenericDict()) {
      parts.push_back(absl::StrCat(entry.key().isString() ? entry.key().toStringRef()
                                                           : entry.key().tagKind(),
                                   ": ", DescribeValue(entry.value())));
    }
    return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
  }
  return value.tagKind();
}

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace kd
