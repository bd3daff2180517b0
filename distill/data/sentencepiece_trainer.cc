#include "distill/data/sentencepiece_trainer.h"

#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "distill/data/internal/sentencepiece_model.h"

extern char** environ;

namespace kd {
namespace {

// Lines longer than this are left out of the training (SentencePiece skips them).
constexpr int64_t kMaxLineBytes = int64_t{1} << 20;

// Removes a folder and what is in it when it goes out of scope.
class TemporaryFolder {
 public:
  explicit TemporaryFolder(std::string path) : path_(std::move(path)) {}
  ~TemporaryFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// What spm_train said went wrong: the reason of its failed check ("./src/x.cc(580) [check]
// reason") or its first line; a vocabulary too small for the corpus's characters is said in
// this API's terms (spm_train's own names its flags).
std::string TrainerReason(absl::string_view log) {
  std::string reason;
  for (absl::string_view line : absl::StrSplit(log, '\n', absl::SkipWhitespace())) {
    if (const size_t at = line.rfind("] ");
        at != absl::string_view::npos && absl::StrContains(line, "[")) {
      reason = std::string(line.substr(at + 2));
      break;
    }
  }
  if (reason.empty()) {
    const std::vector<absl::string_view> lines =
        absl::StrSplit(log, '\n', absl::SkipWhitespace());
    return lines.empty() ? "it failed without saying why" : std::string(lines.front());
  }
  // "Vocabulary size is smaller than required_chars. 100 vs 345. Increase vocab_size or ..."
  constexpr absl::string_view kSmall = "Vocabulary size is smaller than required_chars. ";
  int64_t given, needed;
  if (absl::StartsWith(reason, kSmall)) {
    const std::vector<absl::string_view> words =
        absl::StrSplit(absl::string_view(reason).substr(kSmall.size()), absl::ByAnyChar(" ."));
    if (words.size() >= 3 && words[1] == "vs" && absl::SimpleAtoi(words[0], &given) &&
        absl::SimpleAtoi(words[2], &needed)) {
      return absl::StrCat("a vocabulary of ", given, " pieces cannot hold the 3 special pieces, "
                          "the 256 byte pieces and the corpus's characters: give vocab_size >= ",
                          needed);
    }
  }
  return reason;
}

}  // namespace

absl::StatusOr<std::string> TrainSentencePiece(const std::vector<std::string>& documents,
                                               const SentencePieceTrainOptions& options) {
  std::string input;
  for (const std::string& document : documents) {
    for (absl::string_view line : absl::StrSplit(document, '\n', absl::SkipEmpty())) {
      absl::StrAppend(&input, line, "\n");
    }
  }
  if (input.empty()) {
    return absl::InvalidArgumentError(
        "SentencePiece training: no text to train on; give documents with text");
  }
  std::error_code error;
  const std::string parent = options.work_dir.empty()
                                 ? std::filesystem::temp_directory_path(error).string()
                                 : options.work_dir;
  std::string pattern = absl::StrCat(parent, "/.spm_train.XXXXXX");
  if (::mkdtemp(pattern.data()) == nullptr) {
    return absl::UnavailableError(absl::StrCat("SentencePiece training: cannot make a folder in ",
                                               parent, ": ", std::strerror(errno)));
  }
  const TemporaryFolder work(pattern);
  const std::string input_path = work.path() + "/input.txt";
  const std::string log_path = work.path() + "/log.txt";
  KD_RETURN_IF_ERROR(WriteFileAtomically(input_path, input));

  const std::vector<std::string> args = {
      options.spm_train,
      "--input=" + input_path,
      "--model_prefix=" + work.path() + "/model",
      absl::StrCat("--vocab_size=", options.vocab_size),
      "--model_type=bpe",
      "--byte_fallback=true",
      absl::StrCat("--character_coverage=", options.character_coverage),
      // Llama's: the text as it is (Decode gives its bytes back), digits one by one.
      "--normalization_rule_name=identity",
      "--remove_extra_whitespaces=false",
      "--allow_whitespace_only_pieces=true",
      "--split_digits=true",
      absl::StrCat("--max_sentence_length=", kMaxLineBytes),
      // One thread and a seed: the same model on every machine.
      "--num_threads=1",
      absl::StrCat("--random_seed=", options.seed),
      // Warnings and errors only: its progress is pages of INFO lines.
      "--minloglevel=1",
  };
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid;
  const int spawned = options.spm_train.find('/') == std::string::npos
                          ? ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ)
                          : ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "SentencePiece training: cannot run ", options.spm_train, " (", std::strerror(spawned),
        "); install Debian's sentencepiece package (apt-get install sentencepiece; "
        "tools/install_deps.sh does)"));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const absl::StatusOr<std::string> log = ReadFile(log_path, kMaxTextBytes);
    return absl::InvalidArgumentError(
        absl::StrCat("SentencePiece training: ", TrainerReason(log.ok() ? *log : std::string())));
  }
  KD_ASSIGN_OR_RETURN(const std::string model, ReadFile(work.path() + "/model.model"));
  return data_internal::WithoutTrainerPaths(model);
}

}  // namespace kd
