// torchdistill's YAML, read as torchdistill reads it (PyYAML's FullLoader with torchdistill's
// constructors, torchdistill/common/yaml_util.py), into a tree that keeps each value's
// file:line:column: anchors and aliases resolved, merge keys (<<) merged, scalars typed by
// YAML 1.1's rules as PyYAML types them (`1e-5` is a string there, `1.0e-5` a float, `yes` a
// bool), !join / !pathjoin / !expanduser / !abspath evaluated, and the tags that import or call
// Python (!import_call, !import_get, !getattr, ...) kept as nodes naming what they would import,
// for the importer to map onto libkd or report.
#ifndef LIBKD_DISTILL_TORCHDISTILL_YAML_VALUE_H_
#define LIBKD_DISTILL_TORCHDISTILL_YAML_VALUE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kd {
namespace torchdistill {

struct YamlValue {
  enum class Kind {
    kNull,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kMap,
    kCall,  // a Python tag: `tag` (!import_call, !import_get, !getattr, ...) with its map or list
  };
  Kind kind = Kind::kNull;
  std::string text;  // a scalar's text as written (for kString: the string)
  bool boolean = false;
  int64_t integer = 0;
  double number = 0;
  std::string tag;                                      // kCall: "!import_call", ...
  std::vector<std::shared_ptr<const YamlValue>> items;  // kList; kCall of a sequence tag
  std::vector<std::pair<std::string, std::shared_ptr<const YamlValue>>> entries;  // kMap, kCall
  std::string file;
  int line = 0;    // from 1
  int column = 0;  // from 1

  bool is_scalar() const {
    return kind != Kind::kList && kind != Kind::kMap && kind != Kind::kCall;
  }
  // The entry `key` of a map (or a call's map); null if absent.
  const YamlValue* Find(const std::string& key) const;
  // "file:line:col"
  std::string Where() const;
  // "a string", "a list", "!import_call", ...: what it is, for messages.
  std::string Describe() const;
};

// Python's os.path.expanduser for "~/..." (what !expanduser, !pathjoin and torchvision's
// dataset roots do).
std::string ExpandUser(const std::string& path);

// A value the importer makes (rewriting torchdistill 0.x's forms as 1.x's), placed where `at`
// is, so that what it reports points there; a string; a map of `entries`.
std::shared_ptr<YamlValue> Made(YamlValue::Kind kind, const YamlValue& at);
std::shared_ptr<YamlValue> MadeString(const std::string& text, const YamlValue& at);
std::shared_ptr<YamlValue> MadeMap(
    std::vector<std::pair<std::string, std::shared_ptr<const YamlValue>>> entries,
    const YamlValue& at);

// Bounds on what a torchdistill YAML may hold (its configs are a few KB): the file, one
// scalar or joined string, nesting, and the values the document stands for once its aliases
// are expanded (each anchored node is converted once and shared, so a "billion laughs" costs
// nothing to read, but the importer walks what it stands for).
inline constexpr int64_t kMaxYamlBytes = int64_t{4} << 20;  // 4 MiB
inline constexpr size_t kMaxYamlString = size_t{1} << 16;   // 64 KiB
inline constexpr size_t kMaxYamlDepth = 256;
inline constexpr int64_t kMaxYamlValues = 1000000;

// OK if `text` is UTF-8 without control bytes (but tab, newline and carriage return), as PyYAML
// reads text; else InvalidArgument "file:line:col: byte 0x..: ..." where the first one stands.
absl::Status CheckYamlText(const std::string& text, const std::string& file);

// Reads torchdistill YAML. InvalidArgument "file:line:col: ..." for a syntax error, an unknown
// tag, a cyclic alias, a tag given the wrong node (a !join of a mapping), a second document,
// an integer beyond 64 bits, or past the bounds above. `file` names the text in messages.
absl::StatusOr<std::shared_ptr<const YamlValue>> ParseTorchdistillYaml(const std::string& text,
                                                                       const std::string& file);
absl::StatusOr<std::shared_ptr<const YamlValue>> ReadTorchdistillYaml(const std::string& path);

}  // namespace torchdistill
}  // namespace kd

#endif  // LIBKD_DISTILL_TORCHDISTILL_YAML_VALUE_H_
