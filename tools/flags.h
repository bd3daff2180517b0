// Checking a tool's command line and reading flag files, without absl's parser's exits: every
// problem is a status naming the flag (and a flag file's path:line), which the tools print as
// their one line (tools/tool_util.h, ParseFlagsOrExit). Depends on absl only, so that the
// flag-file fuzzer (//fuzz:flag_file_fuzzer) builds without libtorch.
#ifndef LIBKD_TOOLS_FLAGS_H_
#define LIBKD_TOOLS_FLAGS_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kd {

// Whether `arg` asks for help (--help, --helpfull, --helpshort, one dash or two).
bool IsHelpFlag(absl::string_view arg);

// This program's own flags (those defined in files under tools/), as --name, sorted.
std::vector<std::string> ProgramFlags();

// Checks the flag argument args[*i] (a separate value, `--name value`, advances *i past it):
// InvalidArgument for a stray argument, an unknown flag (with the nearest of ProgramFlags()),
// a missing or bad value (absl's reason). absl's built-in flags pass. `where` prefixes messages
// (a flag file's "path:line: ").
absl::Status CheckFlagArgument(const std::vector<std::string>& args, size_t* i,
                               absl::string_view where = "");

// The flags of a flag file's `text`: one --name=value a line, blank lines and lines starting
// with '#' skipped, each checked with CheckFlagArgument; InvalidArgument naming `path`:line for
// a bad line, a nested --flagfile or a --help (both belong on the command line).
absl::StatusOr<std::vector<std::string>> ParseFlagFile(absl::string_view text,
                                                       absl::string_view path);

}  // namespace kd

#endif  // LIBKD_TOOLS_FLAGS_H_
