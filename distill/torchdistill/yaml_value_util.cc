// YamlValue's own functions, the values the importer makes, and the text check before parsing
// (distill/torchdistill/yaml_value.h).
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "distill/torchdistill/yaml_value.h"

namespace kd {
namespace torchdistill {

std::string ExpandUser(const std::string& path) {
  if (path.empty() || path[0] != '~') return path;
  const char* home = std::getenv("HOME");
  return (home != nullptr ? std::string(home) : std::string("~")) + path.substr(1);
}

const YamlValue* YamlValue::Find(const std::string& key) const {
  for (const auto& [name, value] : entries) {
    if (name == key) return value.get();
  }
  return nullptr;
}

std::string YamlValue::Where() const { return absl::StrCat(file, ":", line, ":", column); }

std::string YamlValue::Describe() const {
  switch (kind) {
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return "a bool";
    case Kind::kInt:
      return "an integer";
    case Kind::kFloat:
      return "a number";
    case Kind::kString:
      return "a string";
    case Kind::kList:
      return "a list";
    case Kind::kMap:
      return "a mapping";
    case Kind::kCall:
      return tag;
  }
  return "?";
}

absl::Status CheckYamlText(const std::string& text, const std::string& file) {
  int line = 1, column = 1;
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s:%d:%d: byte 0x%02x: a control character, which YAML text may not hold", file, line,
          column, c));
    }
    const size_t length = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3
                                                           : (c >> 3) == 0x1e ? 4 : 0;
    bool valid = length > 0 && i + length <= text.size();
    for (size_t k = 1; valid && k < length; ++k) {
      valid = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
    }
    if (!valid) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s:%d:%d: byte 0x%02x: not UTF-8 text; save the file as UTF-8", file, line, column, c));
    }
    if (c == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
    i += length;
  }
  return absl::OkStatus();
}

std::shared_ptr<YamlValue> Made(YamlValue::Kind kind, const YamlValue& at) {
  auto v = std::make_shared<YamlValue>();
  v->kind = kind;
  v->file = at.file;
  v->line = at.line;
  v->column = at.column;
  return v;
}

std::shared_ptr<YamlValue> MadeString(const std::string& text, const YamlValue& at) {
  auto v = Made(YamlValue::Kind::kString, at);
  v->text = text;
  return v;
}

std::shared_ptr<YamlValue> MadeMap(
    std::vector<std::pair<std::string, std::shared_ptr<const YamlValue>>> entries,
    const YamlValue& at) {
  auto v = Made(YamlValue::Kind::kMap, at);
  v->entries = std::move(entries);
  return v;
}


}  // namespace torchdistill
}  // namespace kd
