// Loading distillation configs (distill/config/distill_config.proto) from protobuf text files,
// keeping where each field was written so that every message can point at it.
//
//   KD_ASSIGN_OR_RETURN(kd::LoadedConfig loaded, kd::LoadConfig("tools/configs/kd.pbtxt"));
//   for (const kd::ConfigProblem& p : kd::ValidateConfig(loaded)) {   // config_validator.h
//     std::cerr << p.ToString() << "\n";   // tools/configs/kd.pbtxt:14:7: unknown field ...
//   }
//   const kd::DistillConfig& config = loaded.config;
//
// LoadConfig fails only on syntax errors (the text parser stops at the first). Unknown fields
// are skipped and kept as problems, so ValidateConfig reports them with everything else.
#ifndef LIBKD_DISTILL_CONFIG_CONFIG_LOADER_H_
#define LIBKD_DISTILL_CONFIG_CONFIG_LOADER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "distill/config/distill_config.pb.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/text_format.h"

namespace kd {

// A 1-based line and column in a config file; line 0 when unknown (a config built in code).
// `field` is the field's path from the config's root ("train.optimizer.kwargs[0]"), which names
// the place where there is no line.
struct TextPosition {
  int line = 0;
  int column = 0;
  std::string field;

  // "14:7", as messages print a position; the field path without a line.
  std::string ToString() const;
};

// One problem in a config file: an error (the config cannot run) or a warning (it runs, but
// should change, e.g. a deprecated field name).
struct ConfigProblem {
  enum class Severity { kError, kWarning };

  std::string file;
  TextPosition at;
  std::string message;
  Severity severity = Severity::kError;

  bool is_error() const { return severity == Severity::kError; }
  // "file:line:column: message", with "warning: " before a warning's message; without a line
  // (a config built in code), "file: field: message", the file left out when empty.
  std::string ToString() const;
};

// Where the fields of one parsed message were written. A view into a LoadedConfig: valid
// while it lives.
class ConfigLocator {
 public:
  // `tree` may be null (nothing of the message was written); `self` is where the message
  // begins (its field name in the parent). A config built in code has no tree: `message` is the
  // message itself, whose set fields count as written.
  ConfigLocator(const google::protobuf::Descriptor* descriptor,
                const google::protobuf::TextFormat::ParseInfoTree* tree, TextPosition self,
                const google::protobuf::Message* message = nullptr)
      : descriptor_(descriptor), tree_(tree), self_(std::move(self)), message_(message) {}

  // Where `field` (its `index`-th value if repeated) was written; where the message itself
  // begins if it was not. `field` must be a field of the message.
  TextPosition Of(absl::string_view field, int index = -1) const;
  // Whether `field` (its `index`-th value if repeated) was written.
  bool Written(absl::string_view field, int index = -1) const;
  // The locator of the message in `field` (its `index`-th value if repeated).
  ConfigLocator Nested(absl::string_view field, int index = -1) const;
  // Where the message begins.
  TextPosition self() const { return self_; }
  // The message type's name ("StageConfig").
  std::string type_name() const { return descriptor_ ? descriptor_->name() : "message"; }

 private:
  const google::protobuf::FieldDescriptor* Field(absl::string_view name) const;

  const google::protobuf::Descriptor* descriptor_;
  const google::protobuf::TextFormat::ParseInfoTree* tree_;
  TextPosition self_;
  const google::protobuf::Message* message_;  // a config built in code; else null
};

// A parsed config with the positions of its fields.
struct LoadedConfig {
  DistillConfig config;
  // The file name used in messages (the path as the user gave it).
  std::string file;
  // Unknown fields met while parsing, in text order.
  std::vector<ConfigProblem> parse_problems;
  // Positions of the fields; owned here so that locators stay valid.
  std::unique_ptr<google::protobuf::TextFormat::ParseInfoTree> positions;

  // The locator of the top-level message (which begins at 1:1).
  ConfigLocator Root() const;
};

// A stage of a config, with where it was written.
struct LocatedStage {
  const StageConfig* stage;
  ConfigLocator loc;
};

// The config's stages in the order a run takes them: `train` (a one-stage config), then
// `stages`; the locators from `root` (a LoadedConfig's Root()).
std::vector<LocatedStage> StagesInRunOrder(const DistillConfig& config, const ConfigLocator& root);
// The same, without positions.
std::vector<const StageConfig*> StagesInRunOrder(const DistillConfig& config);

// Reads and parses the config at `path`. Messages name the file as `display_path` (default:
// `path`). NotFound etc. when it cannot be read; InvalidArgument "file:line:col: message" on a
// syntax error.
absl::StatusOr<LoadedConfig> LoadConfig(const std::string& path,
                                        const std::string& display_path = "");

// Parses config text; `file` names it in messages.
absl::StatusOr<LoadedConfig> ParseConfig(absl::string_view text, const std::string& file);

}  // namespace kd

#endif  // LIBKD_DISTILL_CONFIG_CONFIG_LOADER_H_
