// The generic half of config validation, shared by every section: problems with their file
// positions, required fields, lower bounds, readable files, device names, and plugins checked
// against what their registry says (key, kwargs specs, the plugin's own KwargsCheck). What a
// section means stays in config_validator.cc (a stage's models, losses and optimizer in
// stage_checks.cc); what a plugin accepts stays with the plugin.
#ifndef LIBKD_DISTILL_CONFIG_INTERNAL_CHECKER_H_
#define LIBKD_DISTILL_CONFIG_INTERNAL_CHECKER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/registry.h"
#include "distill/config/config_loader.h"
#include "distill/config/kwargs.h"
#include "google/protobuf/message.h"

namespace kd {
namespace config_internal {

class Checker {
 public:
  Checker(const LoadedConfig& loaded, bool check_files)
      : loaded_(loaded), check_files_(check_files), problems_(loaded.parse_problems) {}

  // The problems so far (the parse problems first), sorted by position.
  std::vector<ConfigProblem> TakeProblems();

  void Add(TextPosition at, std::string message);
  void Warn(TextPosition at, std::string message);
  // "missing required field "<field>" in <type><hint>" at the message `loc` points to.
  void Missing(const ConfigLocator& loc, absl::string_view field, absl::string_view hint = "");

  // `field` (an integer or number the user wrote) must be >= `min`.
  template <typename T>
  void AtLeast(const ConfigLocator& loc, absl::string_view field, T value, T min) {
    if (value < min) {
      Add(loc.Of(field), absl::StrCat(field, " must be >= ", min, ", got ", value));
    }
  }
  // A required integer field that must be >= 1.
  void RequiredPositive(const ConfigLocator& loc, absl::string_view field, int64_t value);

  // The key and kwargs of a plugin of `kind` in the message at `loc` (fields "key", "kwargs"):
  // the key registered, the kwargs as the plugin's specs say, then the plugin's own check.
  void CheckPlugin(absl::string_view kind, const std::string& key, const KwargList& kwargs,
                   const ConfigLocator& loc);
  // Reports the problems of `kwargs` (the list in `field` of `loc`); true if there are none.
  bool CheckKwargList(const KwargList& kwargs, const std::optional<std::vector<KwargSpec>>& specs,
                      absl::string_view owner, const ConfigLocator& loc, absl::string_view field);
  // A file the run will read, when files are checked.
  void CheckFile(const std::string& path, const ConfigLocator& loc, absl::string_view field);
  // A device name (cpu, cuda, cuda:N), by its syntax only: the machine may differ.
  void CheckDevice(const std::string& device, const ConfigLocator& loc, absl::string_view field);

  // Every field of `message` and the messages in it, at any depth: doubles finite (kwargs'
  // excepted: CheckKwargList words those with the kwarg's name), strings valid UTF-8, enum
  // numbers values of their enum (proto3's parser accepts any number).
  void CheckFieldValues(const google::protobuf::Message& message, const ConfigLocator& loc,
                        bool in_kwargs = false);

  const LoadedConfig& loaded() const { return loaded_; }

 private:
  const LoadedConfig& loaded_;
  const bool check_files_;
  std::vector<ConfigProblem> problems_;
};

}  // namespace config_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_CONFIG_INTERNAL_CHECKER_H_
