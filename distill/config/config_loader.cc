#include "distill/config/config_loader.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/nearest.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "google/protobuf/io/tokenizer.h"

namespace kd {
namespace {

using ::google::protobuf::Descriptor;
using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::TextFormat;

// Every message type a DistillConfig can hold, itself included.
std::vector<const Descriptor*> ConfigMessageTypes() {
  std::vector<const Descriptor*> types = {DistillConfig::descriptor()};
  std::set<const Descriptor*> seen(types.begin(), types.end());
  for (size_t i = 0; i < types.size(); ++i) {
    for (int f = 0; f < types[i]->field_count(); ++f) {
      const Descriptor* nested = types[i]->field(f)->message_type();
      if (nested != nullptr && seen.insert(nested).second) types.push_back(nested);
    }
  }
  return types;
}

// Collects the text parser's errors and warnings, rewriting the common ones in libkd's words
// and pointing them at the offending name rather than the token after it.
class Collector final : public google::protobuf::io::ErrorCollector {
 public:
  Collector(std::string file, absl::string_view text)
      : file_(std::move(file)), lines_(absl::StrSplit(text, '\n')) {}

  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    errors.push_back(Rewrite(line, column, message));
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {
    // The parser points deprecation warnings past the field's value; the validator reports
    // deprecated names itself, at the name.
    if (absl::StartsWith(message, "text format contains deprecated field")) return;
    warnings.push_back(Rewrite(line, column, message));
  }

  std::vector<ConfigProblem> errors;
  std::vector<ConfigProblem> warnings;

 private:
  ConfigProblem Rewrite(int line, int column, const std::string& message) const {
    // The parser's messages quote their subjects: split on quotes to read them.
    const std::vector<std::string> quoted = absl::StrSplit(message, '"');
    if (quoted.size() == 5 && absl::StartsWith(message, "Message type \"") &&
        absl::StrContains(message, "\" has no field named \"")) {
      return {file_,
              {line + 1, NameColumn(line, column, quoted[3])},
              UnknownField(quoted[1], quoted[3])};
    }
    if (quoted.size() == 5 && absl::StartsWith(message, "Unknown enumeration value of \"")) {
      return {file_,
              {line + 1, NameColumn(line, column, quoted[1])},
              UnknownEnumValue(quoted[1], quoted[3])};
    }
    return {file_, {line + 1, column + 1}, message};
  }

  // The 1-based column where `name` begins, searching back from the parser's column.
  int NameColumn(int line, int column, absl::string_view name) const {
    if (line < 0 || line >= static_cast<int>(lines_.size())) return column + 1;
    const absl::string_view text = lines_[line];
    const size_t found = text.rfind(name, static_cast<size_t>(column));
    return found == absl::string_view::npos ? column + 1 : static_cast<int>(found) + 1;
  }

  static std::string UnknownField(const std::string& type_name, const std::string& field) {
    const Descriptor* type =
        google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(type_name);
    if (type == nullptr) return absl::StrCat("unknown field \"", field, "\" in ", type_name);
    std::vector<std::string> names;
    for (int i = 0; i < type->field_count(); ++i) names.push_back(type->field(i)->name());
    return absl::StrCat("unknown field \"", field, "\" in ", type->name(), "; ",
                        Suggest(field, names));
  }

  static std::string UnknownEnumValue(const std::string& value, const std::string& field) {
    std::vector<std::string> names;
    for (const Descriptor* type : ConfigMessageTypes()) {
      const FieldDescriptor* f = type->FindFieldByName(field);
      if (f == nullptr || f->enum_type() == nullptr) continue;
      for (int i = 0; i < f->enum_type()->value_count(); ++i) {
        names.push_back(f->enum_type()->value(i)->name());
      }
    }
    return absl::StrCat("unknown value \"", value, "\" for field \"", field, "\"; ",
                        Suggest(value, names));
  }

  std::string file_;
  std::vector<absl::string_view> lines_;
};

}  // namespace

std::string TextPosition::ToString() const { return absl::StrCat(line, ":", column); }

std::string ConfigProblem::ToString() const {
  const absl::string_view prefix = is_error() ? "" : "warning: ";
  if (at.line <= 0) return absl::StrCat(file, ": ", prefix, message);
  return absl::StrCat(file, ":", at.ToString(), ": ", prefix, message);
}

const FieldDescriptor* ConfigLocator::Field(absl::string_view name) const {
  return descriptor_ == nullptr ? nullptr : descriptor_->FindFieldByName(std::string(name));
}

TextPosition ConfigLocator::Of(absl::string_view field, int index) const {
  const FieldDescriptor* fd = Field(field);
  if (tree_ == nullptr || fd == nullptr) return self_;
  const TextFormat::ParseLocation location = tree_->GetLocation(fd, index);
  if (location.line < 0) return self_;
  return {location.line + 1, location.column + 1};
}

bool ConfigLocator::Written(absl::string_view field, int index) const {
  const FieldDescriptor* fd = Field(field);
  return tree_ != nullptr && fd != nullptr && tree_->GetLocation(fd, index).line >= 0;
}

ConfigLocator ConfigLocator::Nested(absl::string_view field, int index) const {
  const FieldDescriptor* fd = Field(field);
  if (fd == nullptr) return ConfigLocator(nullptr, nullptr, self_);
  const TextFormat::ParseInfoTree* nested =
      tree_ != nullptr && Written(field, index) ? tree_->GetTreeForNested(fd, index) : nullptr;
  return ConfigLocator(fd->message_type(), nested, Of(field, index));
}

ConfigLocator LoadedConfig::Root() const {
  return ConfigLocator(DistillConfig::descriptor(), positions.get(), {1, 1});
}

absl::StatusOr<LoadedConfig> ParseConfig(absl::string_view text, const std::string& file) {
  LoadedConfig loaded;
  loaded.file = file;
  loaded.positions = std::make_unique<TextFormat::ParseInfoTree>();
  Collector collector(file, text);
  TextFormat::Parser parser;
  parser.RecordErrorsTo(&collector);
  parser.WriteLocationsTo(loaded.positions.get());
  // Unknown fields are skipped and reported with the validation problems, all at once.
  parser.AllowUnknownField(true);
  if (!parser.ParseFromString(std::string(text), &loaded.config)) {
    std::vector<ConfigProblem> problems = std::move(collector.warnings);
    problems.insert(problems.end(), collector.errors.begin(), collector.errors.end());
    std::stable_sort(problems.begin(), problems.end(), [](const auto& a, const auto& b) {
      return std::make_pair(a.at.line, a.at.column) < std::make_pair(b.at.line, b.at.column);
    });
    if (problems.empty()) problems.push_back({file, {}, "cannot parse the config"});
    return absl::InvalidArgumentError(
        absl::StrJoin(problems, "\n",
                      [](std::string* out, const ConfigProblem& p) { out->append(p.ToString()); }));
  }
  loaded.parse_problems = std::move(collector.warnings);
  return loaded;
}

absl::StatusOr<LoadedConfig> LoadConfig(const std::string& path, const std::string& display_path) {
  KD_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseConfig(text, display_path.empty() ? path : display_path);
}

}  // namespace kd
