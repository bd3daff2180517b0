#include "distill/config/config_loader.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "base/nearest.h"
#include "base/status_macros.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

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

// The bracket ({, < or [) still open at the end of `text`, the innermost one, with its
// 0-based line and column; false when all are closed. Reads tokens (strings and comments do not
// count).
bool UnclosedBracket(absl::string_view text, char* bracket, int* line, int* column) {
  google::protobuf::io::ArrayInputStream input(text.data(), static_cast<int>(text.size()));
  struct Silent final : google::protobuf::io::ErrorCollector {
    void AddError(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  } silent;
  google::protobuf::io::Tokenizer tokenizer(&input, &silent);
  tokenizer.set_comment_style(google::protobuf::io::Tokenizer::SH_COMMENT_STYLE);
  struct Open {
    char bracket;
    int line, column;
  };
  std::vector<Open> open;
  while (tokenizer.Next()) {
    const auto& token = tokenizer.current();
    if (token.type != google::protobuf::io::Tokenizer::TYPE_SYMBOL || token.text.size() != 1) {
      continue;
    }
    const char c = token.text[0];
    if (c == '{' || c == '<' || c == '[') {
      open.push_back({c, token.line, token.column});
    } else if ((c == '}' || c == '>' || c == ']') && !open.empty()) {
      open.pop_back();
    }
  }
  if (open.empty()) return false;
  *bracket = open.back().bracket;
  *line = open.back().line;
  *column = open.back().column;
  return true;
}

// The nesting limit of the text parser: deep enough for any config (kwargs dicts nest), shallow
// enough that a hostile file cannot overflow the stack (the parser recurses per level).
constexpr int kMaxNesting = 100;

}  // namespace

std::string TextPosition::ToString() const {
  if (line <= 0) return field.empty() ? "the config" : field;
  return absl::StrCat(line, ":", column);
}

std::string ConfigProblem::ToString() const {
  const absl::string_view prefix = is_error() ? "" : "warning: ";
  if (at.line > 0) return absl::StrCat(file, ":", at.ToString(), ": ", prefix, message);
  std::string text = file.empty() ? "" : absl::StrCat(file, ": ");
  if (!at.field.empty()) absl::StrAppend(&text, at.field, ": ");
  absl::StrAppend(&text, prefix, message);
  return text;
}

namespace {

// `field`'s path under the message at `parent` ("train" + "optimizer" -> "train.optimizer").
std::string FieldPath(absl::string_view parent, absl::string_view field, int index) {
  std::string path = parent.empty() ? std::string(field) : absl::StrCat(parent, ".", field);
  if (index >= 0) absl::StrAppend(&path, "[", index, "]");
  return path;
}

}  // namespace

const FieldDescriptor* ConfigLocator::Field(absl::string_view name) const {
  return descriptor_ == nullptr ? nullptr : descriptor_->FindFieldByName(std::string(name));
}

TextPosition ConfigLocator::Of(absl::string_view field, int index) const {
  const FieldDescriptor* fd = Field(field);
  if (fd == nullptr) return self_;
  // Where it was written; where its message begins if it was not (a missing field's message).
  TextPosition at = self_;
  at.field = FieldPath(self_.field, field, index);
  if (tree_ == nullptr) {
    if (self_.line <= 0) return at;  // built in code: the field's path names it
    return self_;
  }
  const TextFormat::ParseLocation location = tree_->GetLocation(fd, index);
  if (location.line < 0) return self_;
  at.line = location.line + 1;
  at.column = location.column + 1;
  return at;
}

bool ConfigLocator::Written(absl::string_view field, int index) const {
  const FieldDescriptor* fd = Field(field);
  if (fd == nullptr) return false;
  if (tree_ != nullptr) return tree_->GetLocation(fd, index).line >= 0;
  if (message_ == nullptr) return false;
  // A config built in code: what the message holds (proto3 scalars: a value other than 0).
  const google::protobuf::Reflection& reflection = *message_->GetReflection();
  if (fd->is_repeated()) {
    const int size = reflection.FieldSize(*message_, fd);
    return index < 0 ? size > 0 : index < size;
  }
  return reflection.HasField(*message_, fd);
}

ConfigLocator ConfigLocator::Nested(absl::string_view field, int index) const {
  const FieldDescriptor* fd = Field(field);
  if (fd == nullptr) return ConfigLocator(nullptr, nullptr, self_);
  const TextFormat::ParseInfoTree* nested =
      tree_ != nullptr && Written(field, index) ? tree_->GetTreeForNested(fd, index) : nullptr;
  TextPosition at = Of(field, index);
  at.field = FieldPath(self_.field, field, index);  // the nested message's own path
  const google::protobuf::Message* held = nullptr;
  if (message_ != nullptr && fd->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
      Written(field, index)) {
    const google::protobuf::Reflection& reflection = *message_->GetReflection();
    held = fd->is_repeated() ? &reflection.GetRepeatedMessage(*message_, fd, std::max(index, 0))
                             : &reflection.GetMessage(*message_, fd);
  }
  return ConfigLocator(fd->message_type(), nested, at, held);
}

ConfigLocator LoadedConfig::Root() const {
  // A config built in code has no positions: its problems are named by field path.
  if (positions != nullptr) {
    return ConfigLocator(DistillConfig::descriptor(), positions.get(), {1, 1});
  }
  return ConfigLocator(DistillConfig::descriptor(), nullptr, TextPosition{}, &config);
}

absl::StatusOr<LoadedConfig> ParseConfig(absl::string_view text, const std::string& file) {
  // A UTF-8 byte order mark (some editors write one) is not part of the config.
  if (absl::StartsWith(text, "\xEF\xBB\xBF")) text.remove_prefix(3);
  // A binary file (a checkpoint or a model given as the config) is one problem, not the
  // tokenizer's complaints about each byte: text has no control bytes but whitespace.
  int line = 1, column = 1;
  for (const char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n' && c != '\t' && c != '\r' && c != '\f' && c != '\v') || u == 0x7f) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s:%d:%d: byte 0x%02x: this is not a text file; a config is protobuf text format "
          "(e.g. tools/configs/fashion_mnist_kd.pbtxt)",
          file, line, column, u));
    }
    if (c == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  LoadedConfig loaded;
  loaded.file = file;
  loaded.positions = std::make_unique<TextFormat::ParseInfoTree>();
  Collector collector(file, text);
  TextFormat::Parser parser;
  parser.RecordErrorsTo(&collector);
  parser.WriteLocationsTo(loaded.positions.get());
  parser.SetRecursionLimit(kMaxNesting);
  // Unknown fields are skipped and reported with the validation problems, all at once.
  parser.AllowUnknownField(true);
  if (!parser.ParseFromString(std::string(text), &loaded.config)) {
    std::vector<ConfigProblem> problems = std::move(collector.warnings);
    for (ConfigProblem& error : collector.errors) {
      char bracket;
      int line, column;
      if (absl::StrContains(error.message, "exceeded the configured recursion limit")) {
        error.message = absl::StrCat("nested more than ", kMaxNesting,
                                     " levels deep; no config needs that many (is a closing "
                                     "brace missing, or was the file generated wrongly?)");
      } else if (absl::StartsWith(error.message, "Expected") &&
                 absl::EndsWith(error.message, "got: ") &&
                 UnclosedBracket(text, &bracket, &line, &column)) {
        // The parser ran out of text: say which bracket is still open, and where.
        error.message =
            absl::StrCat("the file ends inside the \"", std::string(1, bracket), "\" opened at ",
                         line + 1, ":", column + 1, "; close it with \"",
                         std::string(1, bracket == '{'   ? '}'
                                        : bracket == '<' ? '>'
                                                         : ']'),
                         "\"");
      }
      problems.push_back(std::move(error));
    }
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
  KD_ASSIGN_OR_RETURN(std::string text, ReadFile(path, kMaxTextBytes));
  return ParseConfig(text, display_path.empty() ? path : display_path);
}

std::vector<LocatedStage> StagesInRunOrder(const DistillConfig& config, const ConfigLocator& root) {
  std::vector<LocatedStage> stages;
  if (config.has_train()) stages.push_back({&config.train(), root.Nested("train")});
  for (int i = 0; i < config.stages_size(); ++i) {
    stages.push_back({&config.stages(i), root.Nested("stages", i)});
  }
  return stages;
}

std::vector<const StageConfig*> StagesInRunOrder(const DistillConfig& config) {
  std::vector<const StageConfig*> stages;
  if (config.has_train()) stages.push_back(&config.train());
  for (const StageConfig& stage : config.stages()) stages.push_back(&stage);
  return stages;
}

}  // namespace kd
