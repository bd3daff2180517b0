#include "distill/torchdistill/yaml_value.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <filesystem>
#include <limits>
#include <regex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "yaml-cpp/depthguard.h"
#include "yaml-cpp/yaml.h"

namespace kd {
namespace torchdistill {
namespace {

// torchdistill's tags (yaml_util.load_yaml_file): the ones evaluated here to a string, and the
// ones that import or call Python, kept as kCall nodes.
constexpr const char* kStringTags[] = {"!join", "!pathjoin", "!expanduser", "!abspath"};
constexpr const char* kPythonTags[] = {
    "!import_get", "!import_call", "!import_call_method",    "!call_method",
    "!getattr",    "!setattr",     "!access_by_index_or_key"};

bool OneOf(const std::string& tag, const auto& tags) {
  for (const char* t : tags) {
    if (tag == t) return true;
  }
  return false;
}

// PyYAML's implicit resolvers (YAML 1.1), as torchdistill's FullLoader applies them to plain
// scalars.
const std::regex& BoolPattern() {
  static const std::regex* pattern =
      new std::regex("yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF");
  return *pattern;
}
const std::regex& IntPattern() {
  static const std::regex* pattern =
      new std::regex("[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+");
  return *pattern;
}
const std::regex& FloatPattern() {
  static const std::regex* pattern = new std::regex(
      "[-+]?(?:[0-9][0-9_]*)\\.[0-9_]*(?:[eE][-+][0-9]+)?|\\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?|"
      "[-+]?\\.(?:inf|Inf|INF)|\\.(?:nan|NaN|NAN)");
  return *pattern;
}

bool IsTrue(const std::string& s) {
  const std::string lower = absl::AsciiStrToLower(s);
  return lower == "yes" || lower == "true" || lower == "on";
}

// Python's str() of a scalar, as !join writes it.
std::string PythonStr(const YamlValue& v) {
  switch (v.kind) {
    case YamlValue::Kind::kNull:
      return "None";
    case YamlValue::Kind::kBool:
      return v.boolean ? "True" : "False";
    case YamlValue::Kind::kInt:
      return absl::StrCat(v.integer);
    case YamlValue::Kind::kFloat: {
      if (std::isnan(v.number)) return "nan";
      if (std::isinf(v.number)) return v.number > 0 ? "inf" : "-inf";
      char buffer[64];
      auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), v.number);
      std::string s(buffer, end);
      if (s.find_first_of(".e") == std::string::npos) s += ".0";
      return s;
    }
    default:
      return v.text;
  }
}

class Converter {
 public:
  explicit Converter(std::string file) : file_(std::move(file)) {}

  absl::StatusOr<std::shared_ptr<const YamlValue>> Convert(const YAML::Node& node) {
    for (const YAML::Node& ancestor : stack_) {
      if (node.is(ancestor)) {
        return Error(node, "cyclic alias: the value anchored here contains an alias to itself");
      }
    }
    if (stack_.size() > kMaxYamlDepth) {
      return Error(node, absl::StrCat("nested more than ", kMaxYamlDepth, " levels deep"));
    }
    // An aliased node is the anchored node itself (yaml-cpp shares it), so its position in the
    // text names it: each is converted once and shared, as PyYAML shares the object. A billion
    // laughs (an alias doubling at each of 30 anchors) is then 30 conversions, and the count
    // of values it stands for is bounded below.
    const bool memo = node.Type() != YAML::NodeType::Null &&
                      node.Type() != YAML::NodeType::Undefined && node.Mark().pos >= 0;
    const MemoKey key{node.Mark().pos, static_cast<int>(node.Type()), node.Tag()};
    if (memo) {
      if (auto it = memo_.find(key); it != memo_.end()) {
        KD_RETURN_IF_ERROR(Expand(node, it->second.second));
        return it->second.first;
      }
    }
    stack_.push_back(node);
    const int64_t before = expanded_;
    absl::StatusOr<std::shared_ptr<const YamlValue>> value = ConvertNode(node);
    stack_.pop_back();
    if (!value.ok()) return value;
    KD_RETURN_IF_ERROR(Expand(node, 1));
    if (memo) memo_.emplace(key, std::make_pair(*value, expanded_ - before));
    return value;
  }

 private:
  absl::Status Error(const YAML::Node& node, const std::string& message) const {
    return absl::InvalidArgumentError(
        absl::StrCat(file_, ":", node.Mark().line + 1, ":", node.Mark().column + 1, ": ", message));
  }

  std::shared_ptr<YamlValue> New(const YAML::Node& node, YamlValue::Kind kind) const {
    auto value = std::make_shared<YamlValue>();
    value->kind = kind;
    value->file = file_;
    value->line = node.Mark().line + 1;
    value->column = node.Mark().column + 1;
    return value;
  }

  absl::StatusOr<std::shared_ptr<const YamlValue>> ConvertNode(const YAML::Node& node) {
    const std::string tag = node.Tag();
    const bool custom = !tag.empty() && tag != "?" && tag != "!" && tag[0] == '!';
    if (custom && !OneOf(tag, kStringTags) && !OneOf(tag, kPythonTags)) {
      return Error(node, absl::StrCat("unknown tag ", tag, "; torchdistill's tags are !join, ",
                                      "!pathjoin, !expanduser, !abspath, !import_get, ",
                                      "!import_call, !import_call_method, !call_method, ",
                                      "!getattr, !setattr, !access_by_index_or_key"));
    }
    switch (node.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        if (custom) return Error(node, absl::StrCat(tag, " needs a value"));
        return std::shared_ptr<const YamlValue>(New(node, YamlValue::Kind::kNull));
      case YAML::NodeType::Scalar: {
        if (custom && tag != "!expanduser" && tag != "!abspath") {
          return Error(
              node, absl::StrCat(tag, " takes a ", OneOf(tag, kStringTags) ? "sequence" : "mapping",
                                 ", not a scalar"));
        }
        if (node.Scalar().size() > kMaxYamlString) {
          return Error(node, absl::StrCat("a scalar of ", node.Scalar().size(),
                                          " bytes, more than the ", kMaxYamlString,
                                          " a config's value may hold"));
        }
        absl::StatusOr<std::shared_ptr<YamlValue>> scalar = Scalar(node, tag);
        if (!scalar.ok()) return scalar.status();
        std::shared_ptr<YamlValue> value = *std::move(scalar);
        if (tag == "!expanduser") value->text = ExpandUser(value->text);
        if (tag == "!abspath") value->text = std::filesystem::absolute(value->text).string();
        if (custom) value->kind = YamlValue::Kind::kString;
        return std::shared_ptr<const YamlValue>(value);
      }
      case YAML::NodeType::Sequence: {
        std::vector<std::shared_ptr<const YamlValue>> items;
        for (const YAML::Node& item : node) {
          absl::StatusOr<std::shared_ptr<const YamlValue>> v = Convert(item);
          if (!v.ok()) return v.status();
          items.push_back(*std::move(v));
        }
        if (tag == "!join" || tag == "!pathjoin") {
          std::vector<std::string> parts;
          for (const auto& item : items) {
            if (!item->is_scalar()) {
              return Error(node, absl::StrCat(tag, " joins scalars; item ", parts.size() + 1,
                                              " is ", item->Describe()));
            }
            parts.push_back(PythonStr(*item));
          }
          size_t length = 0;
          for (const std::string& part : parts) length += part.size() + 1;
          if (length > kMaxYamlString) {
            return Error(node, absl::StrCat(tag, " makes a string of more than ",
                                            kMaxYamlString, " bytes; no config needs one"));
          }
          auto value = New(node, YamlValue::Kind::kString);
          value->text = tag == "!join" ? absl::StrJoin(parts, "") : PathJoin(parts);
          return std::shared_ptr<const YamlValue>(value);
        }
        if (custom && tag != "!getattr" && tag != "!setattr") {
          return Error(node, absl::StrCat(tag, " takes a mapping, not a sequence"));
        }
        auto value = New(node, custom ? YamlValue::Kind::kCall : YamlValue::Kind::kList);
        value->tag = custom ? tag : "";
        value->items = std::move(items);
        return std::shared_ptr<const YamlValue>(value);
      }
      case YAML::NodeType::Map: {
        if (OneOf(tag, kStringTags) || tag == "!getattr" || tag == "!setattr") {
          return Error(node, absl::StrCat(tag, " takes a sequence, not a mapping"));
        }
        auto value = New(node, custom ? YamlValue::Kind::kCall : YamlValue::Kind::kMap);
        value->tag = custom ? tag : "";
        std::vector<std::pair<std::string, std::shared_ptr<const YamlValue>>> merged;
        std::unordered_set<std::string> keys;  // a hash set: 200,000 keys were quadratic
        for (auto it = node.begin(); it != node.end(); ++it) {
          if (!it->first.IsScalar()) {
            return Error(it->first, "a mapping key must be a scalar here");
          }
          const std::string key = it->first.Scalar();
          if (key.size() > kMaxYamlString) {
            return Error(it->first, absl::StrCat("a key of ", key.size(), " bytes, more than the ",
                                                 kMaxYamlString, " a config's key may hold"));
          }
          absl::StatusOr<std::shared_ptr<const YamlValue>> v = Convert(it->second);
          if (!v.ok()) return v.status();
          if (key == "<<" && it->first.Tag() == "?") {  // a merge key: its entries, unless given
            std::vector<std::shared_ptr<const YamlValue>> sources;
            if ((*v)->kind == YamlValue::Kind::kMap) sources.push_back(*v);
            if ((*v)->kind == YamlValue::Kind::kList) sources = (*v)->items;
            if (sources.empty() && (*v)->kind != YamlValue::Kind::kList) {  // PyYAML refuses
              return Error(it->second, "a merge key (<<) takes a mapping or a list of them, not " +
                                           (*v)->Describe());
            }
            for (const auto& source : sources) {
              if (source->kind != YamlValue::Kind::kMap) {
                return Error(it->second, "a merge key (<<) takes a mapping or a list of them");
              }
              for (const auto& entry : source->entries) merged.push_back(entry);
            }
            continue;
          }
          if (!keys.insert(key).second) {
            return Error(it->first, absl::StrCat("duplicate key \"", absl::CHexEscape(key.substr(0, 80)), "\""));
          }
          value->entries.emplace_back(key, *std::move(v));
        }
        for (auto& entry : merged) {
          if (keys.insert(entry.first).second) value->entries.push_back(std::move(entry));
        }
        KD_RETURN_IF_ERROR(Expand(node, static_cast<int64_t>(merged.size())));
        return std::shared_ptr<const YamlValue>(value);
      }
    }
    return Error(node, "unreadable YAML node");
  }

  absl::StatusOr<std::shared_ptr<YamlValue>> Scalar(const YAML::Node& node,
                                                    const std::string& tag) const {
    const std::string& s = node.Scalar();
    auto value = New(node, YamlValue::Kind::kString);
    value->text = s;
    if (tag != "?") return value;  // quoted, or tagged: a string
    if (std::regex_match(s, BoolPattern())) {
      value->kind = YamlValue::Kind::kBool;
      value->boolean = IsTrue(s);
    } else if (std::regex_match(s, IntPattern())) {
      std::string digits = absl::StrReplaceAll(s, {{"_", ""}});
      int base = 10;
      size_t start = (digits[0] == '-' || digits[0] == '+') ? 1 : 0;
      if (digits.compare(start, 2, "0x") == 0) {
        base = 16;
      } else if (digits.compare(start, 2, "0b") == 0) {
        base = 2;
      } else if (digits.size() > start + 1 && digits[start] == '0') {
        base = 8;
      }
      std::string body = digits.substr(start + (base == 16 || base == 2 ? 2 : 0));
      value->kind = YamlValue::Kind::kInt;
      errno = 0;
      const unsigned long long magnitude = std::strtoull(body.c_str(), nullptr, base);
      const bool negative = digits[0] == '-';
      if (errno == ERANGE || magnitude > static_cast<unsigned long long>(INT64_MAX) + negative) {
        return Error(node, absl::StrCat("integer ", s, " does not fit in 64 bits"));
      }
      value->integer = negative ? static_cast<int64_t>(0ULL - magnitude)
                                : static_cast<int64_t>(magnitude);
    } else if (std::regex_match(s, FloatPattern())) {
      value->kind = YamlValue::Kind::kFloat;
      const std::string lower = absl::AsciiStrToLower(absl::StrReplaceAll(s, {{"_", ""}}));
      if (lower.find("inf") != std::string::npos) {
        value->number = (lower[0] == '-' ? -1 : 1) * std::numeric_limits<double>::infinity();
      } else if (lower.find("nan") != std::string::npos) {
        value->number = std::numeric_limits<double>::quiet_NaN();
      } else {
        value->number = std::strtod(lower.c_str(), nullptr);
      }
    }
    return value;
  }

  // os.path.expanduser(os.path.join(*parts)): an absolute part restarts the path.
  static std::string PathJoin(const std::vector<std::string>& parts) {
    std::string path;
    for (const std::string& part : parts) {
      if (!part.empty() && part[0] == '/') {
        path = part;
      } else if (path.empty() || path.back() == '/') {
        path += part;
      } else {
        path += "/" + part;
      }
    }
    return ExpandUser(path);
  }

  // Counts `values` more values in the document as its aliases expand it: past
  // kMaxYamlValues, an error (the importer walks what aliases stand for).
  absl::Status Expand(const YAML::Node& node, int64_t values) {
    expanded_ += values;
    if (expanded_ > kMaxYamlValues) {
      return Error(node, absl::StrCat("the document stands for more than ", kMaxYamlValues,
                                      " values once its aliases are expanded (an alias "
                                      "repeated within aliases?); no config needs that many"));
    }
    return absl::OkStatus();
  }

  struct MemoKey {
    int pos;
    int type;
    std::string tag;
    bool operator==(const MemoKey& o) const {
      return pos == o.pos && type == o.type && tag == o.tag;
    }
  };
  struct MemoHash {
    size_t operator()(const MemoKey& k) const {
      return std::hash<int>()(k.pos) * 31 + std::hash<int>()(k.type) * 7 +
             std::hash<std::string>()(k.tag);
    }
  };

  std::string file_;
  std::vector<YAML::Node> stack_;
  // Converted nodes by their place in the text, with the count of values each stands for.
  std::unordered_map<MemoKey, std::pair<std::shared_ptr<const YamlValue>, int64_t>, MemoHash>
      memo_;
  int64_t expanded_ = 0;
};

}  // namespace

absl::StatusOr<std::shared_ptr<const YamlValue>> ParseTorchdistillYaml(const std::string& text,
                                                                       const std::string& file) {
  KD_RETURN_IF_ERROR(CheckYamlText(text, file));
  YAML::Node root;
  try {
    std::vector<YAML::Node> documents = YAML::LoadAll(text);
    if (documents.size() > 1) {
      const YAML::Mark at = documents[1].Mark();
      return absl::InvalidArgumentError(absl::StrCat(
          file, ":", at.line + 1, ":", at.column + 1,
          ": a second YAML document; torchdistill reads one (PyYAML's load refuses more): "
          "keep one config a file"));
    }
    if (!documents.empty()) root = documents[0];
  } catch (const YAML::DeepRecursion& e) {
    return absl::InvalidArgumentError(absl::StrCat(file, ":", e.mark.line + 1, ":",
                                                   e.mark.column + 1, ": nested more than ",
                                                   kMaxYamlDepth, " levels deep"));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
  }
  Converter converter(file);
  absl::StatusOr<std::shared_ptr<const YamlValue>> value = converter.Convert(root);
  if (value.ok() && (*value)->kind != YamlValue::Kind::kMap) {
    return absl::InvalidArgumentError(
        absl::StrCat((*value)->Where(),
                     ": a torchdistill config is a mapping (datasets, models, train, test), "
                     "not ",
                     (*value)->Describe()));
  }
  return value;
}

absl::StatusOr<std::shared_ptr<const YamlValue>> ReadTorchdistillYaml(const std::string& path) {
  // Regular files only, capped as every config (a FIFO or a folder is refused by name).
  absl::StatusOr<std::string> text = ReadFile(path, kMaxYamlBytes);
  if (!text.ok()) return text.status();
  return ParseTorchdistillYaml(*text, path);
}

}  // namespace torchdistill
}  // namespace kd
