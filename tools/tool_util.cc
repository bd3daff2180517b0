#include "tools/tool_util.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/ivalue_util.h"
#include "base/nearest.h"

namespace kd {

int Fail(absl::string_view tool, absl::string_view message) {
  std::string line(message);
  for (char& c : line) {
    if (c == '\n') c = ' ';
  }
  std::cerr << tool << ": " << line << std::endl;
  return 2;
}

int ExitCodeOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kOutOfRange:
      return 2;
    default:
      return 1;
  }
}

namespace {

// absl's built-in flags, which its parser handles itself.
bool IsBuiltinFlag(absl::string_view name) {
  static constexpr absl::string_view kBuiltins[] = {
      "help",      "helpfull",   "helpshort",       "helppackage",
      "helpmatch", "version",    "only_check_args", "flagfile",
      "fromenv",   "tryfromenv", "undefok"};
  for (absl::string_view b : kBuiltins) {
    if (name == b) return true;
  }
  return false;
}

// This program's own flags (not absl's or a library's internals), as --name.
std::vector<std::string> ProgramFlags() {
  std::vector<std::string> names;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::StrContains(flag->Filename(), "tools/")) names.push_back(absl::StrCat("--", name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

void ParseFlagsOrExit(int argc, char** argv, absl::string_view tool) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::StartsWith(arg, "-") || arg == "-") {
      std::exit(Fail(tool, absl::StrCat("unexpected argument \"", arg,
                                        "\": give every input as a flag, --name=value (see "
                                        "--help)")));
    }
    absl::string_view body = absl::StripPrefix(absl::StripPrefix(arg, "-"), "-");
    const size_t eq = body.find('=');
    const absl::string_view name = body.substr(0, eq);
    if (IsBuiltinFlag(name)) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no") && eq == absl::string_view::npos) {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>()) continue;  // --noflag
    }
    if (flag == nullptr || flag->IsRetired()) {
      std::exit(Fail(tool, absl::StrCat("unknown flag --", name, "; ",
                                        Suggest(absl::StrCat("--", name), ProgramFlags()))));
    }
    std::string value;
    if (eq != absl::string_view::npos) {
      value = std::string(body.substr(eq + 1));
    } else if (flag->IsOfType<bool>()) {
      value = "true";
    } else if (i + 1 < argc) {
      value = argv[++i];  // --flag value, as absl reads it
    } else {
      std::exit(Fail(tool, absl::StrCat("--", name, " needs a value: --", name, "=...")));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      std::exit(Fail(tool, absl::StrCat("--", name, ": ", error)));
    }
  }
  absl::ParseCommandLine(argc, argv);
}

std::string ErrorSummary(absl::string_view message) {
  std::vector<absl::string_view> lines = absl::StrSplit(message, '\n', absl::SkipWhitespace());
  if (lines.empty()) return std::string();
  // A TorchScript call refused by its schema: the reason is the first line ("forward() Expected
  // a value of type 'Tensor' for argument 'x' but instead found type 'str'."), followed by
  // Position:, Value:, Declaration: and Cast error details: lines. Keep the reason and the
  // declaration.
  for (absl::string_view line : lines) {
    line = absl::StripAsciiWhitespace(line);
    if (absl::StartsWith(line, "Declaration:") && lines.size() > 1 &&
        !absl::StartsWith(absl::StripAsciiWhitespace(lines.front()), "Declaration:")) {
      return absl::StrCat(absl::StripAsciiWhitespace(lines.front()), " (", line, ")");
    }
  }
  return std::string(absl::StripAsciiWhitespace(lines.back()));
}

std::string DescribeValue(const c10::IValue& value) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    std::string dtype(c10::toString(t.scalar_type()));
    // "Float" -> "float32" as Python prints dtypes.
    static const std::vector<std::pair<std::string, std::string>> kNames = {
        {"Float", "float32"}, {"Double", "float64"}, {"Half", "float16"}, {"BFloat16", "bfloat16"},
        {"Long", "int64"},    {"Int", "int32"},      {"Short", "int16"},  {"Char", "int8"},
        {"Byte", "uint8"},    {"Bool", "bool"}};
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
      parts.push_back(
          absl::StrCat(entry.key().isString() ? entry.key().toStringRef() : entry.key().tagKind(),
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
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
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
