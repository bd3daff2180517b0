// Small helpers shared by the tools: failing with one line, describing values, JSON strings.
#ifndef LIBKD_TOOLS_TOOL_UTIL_H_
#define LIBKD_TOOLS_TOOL_UTIL_H_

#include <memory>
#include <string>

#include <ATen/core/ivalue.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hooks/model.h"

namespace kd {

// The model file at `path`: an AOTInductor package if it ends in ".pt2" (kd::LoadAotiModel),
// else TorchScript (kd::LoadTorchScriptModel).
absl::StatusOr<std::unique_ptr<Model>> LoadModelFile(const std::string& path);

// Prints "<tool>: <message>" on one line to stderr and returns exit code 2.
int Fail(absl::string_view tool, absl::string_view message);

// `text` as one line that cannot drive a terminal: a newline becomes a space, other control
// bytes (an ANSI escape in a module path or a YAML key) are shown as \xNN, and Unicode's
// bidirectional controls (U+202E, ...) as \uXXXX, not obeyed.
std::string TerminalSafe(absl::string_view text);

// The installer's virtual environment (tools/install_deps.sh): $LIBKD_VENV, else
// ~/.cache/libkd/venv.
std::string InstallerVenv();

// The exit code of a tool that stops on `status`: 2 for bad input (InvalidArgument, NotFound,
// PermissionDenied, DataLoss, OutOfRange, AlreadyExists: something the user gave is wrong or
// taken), 1 for a failure
// of the run itself.
int ExitCodeOf(const absl::Status& status);

// absl::ParseCommandLine, after checking the command line the way the tools promise: any bad
// input exits with 2 and one line naming the flag (absl's own parser exits 1, with several).
// An unknown flag gets the nearest of this tool's flags; a bad value absl's reason; a
// positional argument the flag syntax. --help prints the usage and this tool's flags to stdout
// and exits 0. --flagfile=A[,B] is read here, through kd::ReadFile's cap (a FIFO, a device or a
// file over 64 MiB is refused), each line checked as a command-line flag and named by
// file:line when bad; flag files do not nest.
void ParseFlagsOrExit(int argc, char** argv, absl::string_view tool);

// Flushes stdout and returns `code`, or 1 with one line on stderr when what the tool printed
// could not be written (a full disk, /dev/full, a closed pipe): output is never lost silently.
//   return kd::FinishOutput(kTool, Run());
int FinishOutput(absl::string_view tool, int code);

// The error itself from a libtorch message: its last non-empty line (after a TorchScript
// traceback), or for a call its schema refused, the reason and the declaration.
std::string ErrorSummary(absl::string_view message);

// "float32[1, 8, 28, 28]" for a tensor; "(float32[2, 4], float32[2, 4])" for a tuple; a list
// as "[...]"; None as "None"; other values by their type.
std::string DescribeValue(const c10::IValue& value);

// A JSON string literal with the necessary escapes.
std::string JsonString(absl::string_view s);

}  // namespace kd

#endif  // LIBKD_TOOLS_TOOL_UTIL_H_
