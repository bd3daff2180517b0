#include "tools/flags.h"

#include <algorithm>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/nearest.h"

namespace kd {
namespace {

// absl's built-in flags, which its parser handles itself.
bool IsBuiltinFlag(absl::string_view name) {
  static constexpr absl::string_view kBuiltins[] = {
      "help",      "helpfull",   "helpshort",       "helppackage",
      "helpmatch", "version",    "only_check_args", "flagfile",
      "fromenv",   "tryfromenv", "undefok"};
  return std::find(std::begin(kBuiltins), std::end(kBuiltins), name) != std::end(kBuiltins);
}

// "--name=value" -> "name=value"; "-name" -> "name".
absl::string_view Body(absl::string_view arg) {
  return absl::StripPrefix(absl::StripPrefix(arg, "-"), "-");
}

}  // namespace

bool IsHelpFlag(absl::string_view arg) {
  if (!absl::StartsWith(arg, "-")) return false;
  const absl::string_view body = Body(arg);
  return body == "help" || body == "helpfull" || body == "helpshort";
}

std::vector<std::string> ProgramFlags() {
  std::vector<std::string> names;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::StrContains(flag->Filename(), "tools/")) names.push_back(absl::StrCat("--", name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status CheckFlagArgument(const std::vector<std::string>& args, size_t* i,
                               absl::string_view where) {
  const absl::string_view arg = args[*i];
  if (!absl::StartsWith(arg, "-") || arg == "-") {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "unexpected argument \"", arg,
                     "\": give every input as a flag, --name=value (see --help)"));
  }
  const absl::string_view body = Body(arg);
  const size_t eq = body.find('=');
  const absl::string_view name = body.substr(0, eq);
  if (name == "fromenv" || name == "tryfromenv") {
    // absl's reader of flags from the environment exits 1 on its own errors, outside the
    // tools' one-line contract; libkd's tools take flags on the command line or in a file.
    return absl::InvalidArgumentError(absl::StrCat(
        where, "--", name, " is not supported: give the flags on the command line or in a file "
        "(--flagfile=FILE, one --name=value a line)"));
  }
  if (IsBuiltinFlag(name)) return absl::OkStatus();
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr && absl::StartsWith(name, "no") && eq == absl::string_view::npos) {
    absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
    if (negated != nullptr && negated->IsOfType<bool>()) return absl::OkStatus();  // --noflag
  }
  if (flag == nullptr || flag->IsRetired()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "unknown flag --", name, "; ", Suggest(absl::StrCat("--", name), ProgramFlags())));
  }
  std::string value;
  if (eq != absl::string_view::npos) {
    value = std::string(body.substr(eq + 1));
  } else if (flag->IsOfType<bool>()) {
    value = "true";
  } else if (*i + 1 < args.size()) {
    value = args[++*i];  // --flag value, as absl reads it
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "--", name, " needs a value: --", name, "=..."));
  }
  // ParseFrom sets the flag; absl's parser sets it again after, to the same value.
  std::string error;
  if (!flag->ParseFrom(value, &error)) {
    return absl::InvalidArgumentError(absl::StrCat(where, "--", name, ": ", error));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ParseFlagFile(absl::string_view text,
                                                       absl::string_view path) {
  std::vector<std::string> flags;
  const std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  for (size_t n = 0; n < lines.size(); ++n) {
    const std::string line(absl::StripAsciiWhitespace(lines[n]));
    if (line.empty() || line[0] == '#') continue;
    const std::string where = absl::StrCat(path, ":", n + 1, ": ");
    const absl::string_view body = Body(line);
    if (absl::StartsWith(line, "-") &&
        (body == "flagfile" || absl::StartsWith(body, "flagfile="))) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "a flag file cannot name another; give every file in the first --flagfile=A,B"));
    }
    if (IsHelpFlag(line)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "--help belongs on the command line, not in a flag file"));
    }
    std::vector<std::string> one = {line};
    size_t i = 0;
    if (absl::Status checked = CheckFlagArgument(one, &i, where); !checked.ok()) return checked;
    flags.push_back(line);
  }
  return flags;
}

}  // namespace kd
