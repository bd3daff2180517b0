#include "distill/data/text_corpus.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "base/torch_status.h"

namespace kd {

std::vector<std::string> SplitSeparatedText(absl::string_view text, absl::string_view separator) {
  std::vector<std::string> documents;
  std::string current;
  bool has_lines = false;
  auto finish = [&] {
    if (!current.empty()) documents.push_back(std::move(current));
    current.clear();
    has_lines = false;
  };
  while (!text.empty()) {
    const size_t end = text.find('\n');
    absl::string_view line = text.substr(0, end);
    text.remove_prefix(end == absl::string_view::npos ? text.size() : end + 1);
    absl::string_view bare = line;
    if (!bare.empty() && bare.back() == '\r') bare.remove_suffix(1);
    if (bare == separator) {
      finish();
      continue;
    }
    if (has_lines) current.push_back('\n');
    current.append(line.data(), line.size());
    has_lines = true;
  }
  finish();
  return documents;
}

absl::StatusOr<std::vector<std::string>> ReadFortunes(const std::string& path,
                                                      absl::string_view separator) {
  std::vector<std::string> files;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("no corpus ", path,
                     "; give a folder of fortune files (Debian's fortunes package: "
                     "/usr/share/games/fortunes) or a text file"));
  }
  if (S_ISDIR(st.st_mode)) {
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(path, error)) {
      const std::string name = entry.path().filename().string();
      // Regular files only (not the .u8 links), and no extension (not the .dat indexes).
      if (!entry.is_symlink() && entry.is_regular_file() && name.find('.') == std::string::npos) {
        files.push_back(entry.path().string());
      }
    }
    if (error) {
      return absl::UnavailableError(absl::StrCat(path, ": cannot list: ", error.message()));
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  std::vector<std::string> documents;
  for (const std::string& file : files) {
    KD_ASSIGN_OR_RETURN(const std::string text, ReadFile(file, kMaxTextBytes));
    for (std::string& document : SplitSeparatedText(text, separator)) {
      documents.push_back(std::move(document));
    }
  }
  if (documents.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": holds no documents (", files.size(),
        " text files without an extension); give a folder of fortune files or a text file"));
  }
  return documents;
}

absl::StatusOr<std::vector<std::vector<std::string>>> SplitDocuments(
    const std::vector<std::string>& documents, uint64_t seed,
    const std::vector<double>& fractions) {
  double sum = 0;
  for (double f : fractions) {
    if (!(f >= 0 && f <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("split fractions must each be in [0, 1]; got ", f));
    }
    sum += f;
  }
  // random_split's test: math.isclose(sum, 1) and sum <= 1.
  if (fractions.empty() || std::abs(sum - 1.0) > 1e-9 || sum > 1.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("split fractions must sum to 1; got [", absl::StrJoin(fractions, ", "), "]"));
  }
  // random_split's counts: floor(n * fraction) each, the remainder one by one from the first.
  const int64_t n = static_cast<int64_t>(documents.size());
  std::vector<int64_t> counts;
  int64_t given = 0;
  for (double f : fractions) {
    counts.push_back(static_cast<int64_t>(std::floor(static_cast<double>(n) * f)));
    given += counts.back();
  }
  for (int64_t i = 0; i < n - given; ++i) ++counts[i % counts.size()];
  KD_ASSIGN_OR_RETURN(const at::Tensor order, CallTorch([&] {
                        at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
                        return at::randperm(n, generator, at::TensorOptions().dtype(at::kLong));
                      }));
  const int64_t* index = order.data_ptr<int64_t>();
  std::vector<std::vector<std::string>> splits(fractions.size());
  int64_t next = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    for (int64_t i = 0; i < counts[s]; ++i) splits[s].push_back(documents[index[next++]]);
  }
  return splits;
}

}  // namespace kd
