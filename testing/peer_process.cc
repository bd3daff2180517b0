#include "testing/peer_process.h"

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kd {
namespace test {

bool LinkedWithTcmalloc() { return dlsym(RTLD_DEFAULT, "tc_malloc") != nullptr; }

std::string PreloadTcmalloc() { return std::string("LD_PRELOAD=") + kTcmallocLibrary; }

bool PeerProcess::Start(const Options& options) {
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) return false;
  pid_ = fork();
  if (pid_ < 0) return false;
  if (pid_ == 0) {
    dup2(to_child[0], STDIN_FILENO);
    dup2(from_child[1], STDOUT_FILENO);
    close(to_child[1]);
    close(from_child[0]);
    for (const std::string& pair : options.env) {
      const size_t eq = pair.find('=');
      if (eq != std::string::npos) setenv(pair.substr(0, eq).c_str(), pair.c_str() + eq + 1, 1);
    }
    std::vector<char*> argv = {const_cast<char*>(options.python.c_str()),
                               const_cast<char*>(options.script.c_str())};
    for (const std::string& arg : options.args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    execv(options.python.c_str(), argv.data());
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  in_ = fdopen(to_child[1], "w");
  out_ = fdopen(from_child[0], "r");
  return in_ != nullptr && out_ != nullptr;
}

std::optional<std::vector<double>> PeerProcess::Ask(const std::string& request) {
  if (in_ == nullptr || out_ == nullptr) return std::nullopt;
  std::fprintf(in_, "%s\n", request.c_str());
  std::fflush(in_);
  char line[4096];
  if (std::fgets(line, sizeof(line), out_) == nullptr) return std::nullopt;
  const std::vector<std::string> words =
      absl::StrSplit(absl::StripAsciiWhitespace(line), ' ', absl::SkipEmpty());
  const std::vector<std::string> asked = absl::StrSplit(request, ' ');
  if (words.empty() || words[0] != asked[0]) return std::nullopt;
  std::vector<double> numbers(words.size() - 1);
  for (size_t i = 1; i < words.size(); ++i) {
    if (!absl::SimpleAtod(words[i], &numbers[i - 1])) return std::nullopt;
  }
  return numbers;
}

PeerProcess::~PeerProcess() {
  if (in_ != nullptr) std::fclose(in_);  // end of input: the script exits
  if (out_ != nullptr) std::fclose(out_);
  if (pid_ > 0) waitpid(pid_, nullptr, 0);
}

}  // namespace test
}  // namespace kd
