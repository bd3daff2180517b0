// silverspoon-kd's feature distillers in a stage's config (StageConfig.feature_distillation):
// the holistic form expanded into what any stage has (forward hooks, the projectors as the
// student's auxiliary modules, one loss term per alignment in the criterion's group
// "alignments"), so the box, the validator and the teacher cache see an ordinary stage.
//
//   KD_ASSIGN_OR_RETURN(kd::StageConfig expanded, kd::ExpandHolistic(stage, inferred));
#ifndef LIBKD_DISTILL_CONFIG_FEATURE_DISTILLATION_H_
#define LIBKD_DISTILL_CONFIG_FEATURE_DISTILLATION_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "distill/config/distill_config.pb.h"

namespace kd {

// The criterion group the alignments' losses are summed into.
inline constexpr char kAlignmentsGroup[] = "alignments";

// An alignment's name: AlignmentConfig.name, else the student module's path.
std::string AlignmentName(const AlignmentConfig& alignment);

// AlignmentConfig.auto_projector (default true).
inline bool AutoProjector(const AlignmentConfig& alignment) {
  return !alignment.has_auto_projector() || alignment.auto_projector();
}

// The student auxiliary module that holds an alignment's output projector.
std::string OutputProjectorName(const AlignmentConfig& alignment);

// Static errors of `config` (the field and the fix), one per line; empty when there are none.
// `criterion_has_terms`: whether the stage's criterion has terms (BLOCKWISE takes none).
std::vector<std::string> FeatureDistillationErrors(const FeatureDistillationConfig& config,
                                                   bool criterion_has_terms);

// `stage` with its HOLISTIC feature_distillation expanded (the section itself cleared);
// `stage` unchanged without one or in BLOCKWISE. `inferred` gives, by alignment name, the
// output projectors auto_projector inferred (absent: none, the student's value as it is).
// InvalidArgument for a config FeatureDistillationErrors refuses, or an auxiliary module or
// term name the alignments' names collide with.
absl::StatusOr<StageConfig> ExpandHolistic(const StageConfig& stage,
                                           const std::map<std::string, PluginConfig>& inferred);

}  // namespace kd

#endif  // LIBKD_DISTILL_CONFIG_FEATURE_DISTILLATION_H_
