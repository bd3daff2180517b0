// Text corpora as documents: reading fortune-mod's files (text separated by "%" lines, what
// Debian's `fortunes` package installs under /usr/share/games/fortunes) and a seeded split of
// the documents into train / validation / test.
//
//   KD_ASSIGN_OR_RETURN(std::vector<std::string> documents,
//                       kd::ReadFortunes("/usr/share/games/fortunes"));
//   KD_ASSIGN_OR_RETURN(std::vector<std::vector<std::string>> splits,
//                       kd::SplitDocuments(documents, /*seed=*/1, {0.9, 0.05, 0.05}));
//   // splits[0]: train, splits[1]: validation, splits[2]: test.
//
// The split is torch.utils.data.random_split's over the documents (same counts, same order,
// with a generator seeded `seed`), so Python reproduces it:
//   random_split(documents, [0.9, 0.05, 0.05], generator=torch.Generator().manual_seed(1))
// Splitting by document keeps every document whole in one split: nothing of a test document
// is seen in training.
#ifndef LIBKD_DISTILL_DATA_TEXT_CORPUS_H_
#define LIBKD_DISTILL_DATA_TEXT_CORPUS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kd {

// The documents of `text`: the runs of lines between lines equal to `separator` (a trailing
// "\r" ignored), each its lines joined by "\n" without the newline that ends the last. Empty
// documents are left out; text after the last separator is the last document.
std::vector<std::string> SplitSeparatedText(absl::string_view text, absl::string_view separator);

// The documents of the fortune files at `path`: a folder (every regular file in it whose name
// has no extension, in name order: fortune-mod's text files; its .dat indexes and .u8 links are
// skipped), or one file. NotFound for a missing path, InvalidArgument for a folder without
// documents, and kd::ReadFile's errors for a file it cannot read.
absl::StatusOr<std::vector<std::string>> ReadFortunes(const std::string& path,
                                                      absl::string_view separator = "%");

// `documents` split as torch.utils.data.random_split(documents, fractions, generator seeded
// `seed`) splits them: one list per fraction, in the permuted order. `fractions`: at least one,
// each in [0, 1], summing to 1; InvalidArgument otherwise.
absl::StatusOr<std::vector<std::vector<std::string>>> SplitDocuments(
    const std::vector<std::string>& documents, uint64_t seed, const std::vector<double>& fractions);

}  // namespace kd

#endif  // LIBKD_DISTILL_DATA_TEXT_CORPUS_H_
