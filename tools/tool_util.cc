#include "tools/tool_util.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file_util.h"
#include "base/ivalue_util.h"
#include "hooks/aoti_model.h"
#include "hooks/torchscript_model.h"
#include "tools/flags.h"

namespace kd {

absl::StatusOr<std::unique_ptr<Model>> LoadModelFile(const std::string& path) {
  if (absl::EndsWith(path, ".pt2")) return LoadAotiModel(path);
  return LoadTorchScriptModel(path);
}

std::string InstallerVenv() {
  if (const char* venv = std::getenv("LIBKD_VENV"); venv != nullptr) return venv;
  const char* home = std::getenv("HOME");
  return absl::StrCat(home != nullptr ? home : "", "/.cache/libkd/venv");
}

std::string TerminalSafe(absl::string_view text) {
  std::string line;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const unsigned char u = static_cast<unsigned char>(c);
    // Unicode's bidirectional controls (U+202A..U+202E, U+2066..U+2069) reorder what a
    // terminal shows after them: shown as \uXXXX too.
    if (u == 0xe2 && i + 2 < text.size()) {
      const unsigned char b1 = static_cast<unsigned char>(text[i + 1]);
      const unsigned char b2 = static_cast<unsigned char>(text[i + 2]);
      if ((b1 == 0x80 && b2 >= 0xaa && b2 <= 0xae) || (b1 == 0x81 && b2 >= 0xa6 && b2 <= 0xa9)) {
        line += absl::StrFormat("\\u%04x", ((b1 & 0x3f) << 6 | (b2 & 0x3f)) | 0x2000);
        i += 2;
        continue;
      }
    }
    if (c == '\n') {
      line += ' ';
    } else if (u < 0x20 || u == 0x7f) {
      line += absl::StrFormat("\\x%02x", u);
    } else {
      line += c;
    }
  }
  return line;
}

int Fail(absl::string_view tool, absl::string_view message) {
  std::cerr << tool << ": " << TerminalSafe(message) << std::endl;
  return 2;
}

int ExitCodeOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kAlreadyExists:  // a run folder in use or holding another run
      return 2;
    default:
      return 1;
  }
}

namespace {

// --help: the usage message and this tool's flags on stdout, exit 0 (absl's exits 1).
[[noreturn]] void PrintHelpAndExit() {
  std::string text = absl::StrCat(absl::ProgramUsageMessage(), "\n\nFlags:\n");
  std::vector<std::pair<std::string, const absl::CommandLineFlag*>> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::StrContains(flag->Filename(), "tools/")) flags.emplace_back(std::string(name), flag);
  }
  std::sort(flags.begin(), flags.end());
  for (const auto& [name, flag] : flags) {
    absl::StrAppend(&text, "  --", name, " (", flag->Help(), "); default: \"", flag->DefaultValue(),
                    "\";\n");
  }
  absl::StrAppend(&text,
                  "  --flagfile (flags read from files, --flagfile=A,B: one --name=value per "
                  "line, '#' starts a comment);\n");
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::exit(std::fflush(stdout) == 0 && !std::ferror(stdout) ? 0 : 1);
}

// The flags of the flag files `spec` names (comma-separated), read through libkd's capped
// reader: a FIFO, a device or a file over 64 MiB is refused, not read.
std::vector<std::string> ReadFlagFiles(absl::string_view spec, absl::string_view tool) {
  std::vector<std::string> flags;
  for (absl::string_view file : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    const std::string path = ResolveUserPath(std::string(file));
    absl::StatusOr<std::string> text = ReadFile(path, kMaxTextBytes);
    if (!text.ok()) std::exit(Fail(tool, absl::StrCat("--flagfile: ", text.status().message())));
    absl::StatusOr<std::vector<std::string>> parsed = ParseFlagFile(*text, path);
    if (!parsed.ok()) std::exit(Fail(tool, parsed.status().message()));
    for (std::string& flag : *parsed) flags.push_back(std::move(flag));
  }
  return flags;
}

}  // namespace

void ParseFlagsOrExit(int argc, char** argv, absl::string_view tool) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::vector<std::string> expanded = {argv[0]};
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") {
      expanded.insert(expanded.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    const absl::string_view arg = args[i];
    if (IsHelpFlag(arg)) PrintHelpAndExit();
    const absl::string_view body = absl::StripPrefix(absl::StripPrefix(arg, "-"), "-");
    if (absl::StartsWith(arg, "-") && (body == "flagfile" || absl::StartsWith(body, "flagfile="))) {
      std::string spec;
      if (body == "flagfile") {
        if (i + 1 >= args.size()) {
          std::exit(Fail(tool, "--flagfile needs a value: --flagfile=FILE"));
        }
        spec = args[++i];
      } else {
        spec = std::string(body.substr(9));
      }
      for (std::string& flag : ReadFlagFiles(spec, tool)) expanded.push_back(std::move(flag));
      continue;
    }
    const size_t first = i;
    if (absl::Status checked = CheckFlagArgument(args, &i); !checked.ok()) {
      std::exit(Fail(tool, checked.message()));
    }
    expanded.insert(expanded.end(), args.begin() + static_cast<std::ptrdiff_t>(first),
                    args.begin() + static_cast<std::ptrdiff_t>(i) + 1);
  }
  // Kept for the process's life: absl may keep pointers into the argv it parsed.
  static std::vector<std::string>* const kept = new std::vector<std::string>();
  *kept = std::move(expanded);
  std::vector<char*> pointers;
  for (std::string& arg : *kept) pointers.push_back(arg.data());
  absl::ParseCommandLine(static_cast<int>(pointers.size()), pointers.data());
}

int FinishOutput(absl::string_view tool, int code) {
  std::cout.flush();
  if (!std::cout.good() || std::fflush(stdout) != 0 || std::ferror(stdout)) {
    const int err = errno;
    std::cerr << tool << ": cannot write to standard output: "
              << (err != 0 ? std::strerror(err) : "write failed") << std::endl;
    return code == 0 ? 1 : code;
  }
  return code;
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
