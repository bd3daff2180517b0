// silverspoon-kd's create_alignments in a stage's config (FeatureDistillationConfig's
// create_alignments): alignments made from regular expressions over the two models' module
// paths, with its matching rules, so that a silverspoon-kd user's patterns give the pairs they
// gave there.
//
//   std::vector<std::string> errors = kd::CreateAlignmentsErrors(fd);  // static: the patterns
//   KD_ASSIGN_OR_RETURN(kd::FeatureDistillationConfig made,
//                       kd::CreateAlignments(fd, teacher_paths, student_paths));
#ifndef LIBKD_DISTILL_CONFIG_CREATE_ALIGNMENTS_H_
#define LIBKD_DISTILL_CONFIG_CREATE_ALIGNMENTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "distill/config/distill_config.pb.h"

namespace kd {

// Static errors of `config.create_alignments` (the field and the fix): an entry with neither or
// both of `modules` and `module_map`, a pattern that is not a regular expression (ECMAScript
// syntax, std::regex), a replacement with an escape Python's re.sub would refuse.
std::vector<std::string> CreateAlignmentsErrors(const FeatureDistillationConfig& config);

// `config` with each create_alignments entry made into alignments, appended to its own
// `alignments` in entry order (the entry cleared), from the models' module paths in their
// named-modules order ("" the root), as silverspoon-kd's create_alignments makes them:
//  - `modules` (its str or list[str]): the teacher modules whose path any pattern is found in
//    (re.search: anywhere in the path, so "layers\\.1" also finds "layers.10" and
//    "layers.1.mlp"; anchor with "$"), each once, in the teacher's order; each aligned with the
//    first student module, in the student's order, in whose path the teacher module's path,
//    read as a pattern, is found;
//  - `module_map` (its dict, in order): for each teacher pattern, the teacher modules it is
//    found in; the student pattern is the replacement with the match substituted where it
//    refers to groups (\1 .. \9, \g<1>: re.sub over the teacher's path), else the replacement
//    as it is; the first student module it is found in.
// Each alignment takes the entry's loss, kwargs, auto_projector and output_selector_index (the
// element of both values). InvalidArgument naming the entry and the pattern where a pattern
// finds no teacher module or a student pattern no student module, or CreateAlignmentsErrors
// has errors.
absl::StatusOr<FeatureDistillationConfig> CreateAlignments(
    const FeatureDistillationConfig& config, const std::vector<std::string>& teacher_paths,
    const std::vector<std::string>& student_paths);

}  // namespace kd

#endif  // LIBKD_DISTILL_CONFIG_CREATE_ALIGNMENTS_H_
