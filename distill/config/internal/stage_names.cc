#include "distill/config/internal/stage_names.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace kd {
namespace config_internal {
namespace {

constexpr size_t kMaxPlainName = 200;

}  // namespace

bool IsPlainName(const std::string& name) {
  return name != "." && name != ".." && name.size() <= kMaxPlainName &&
         std::none_of(name.begin(), name.end(), [](char c) {
           const unsigned char u = static_cast<unsigned char>(c);
           return c == '/' || c == '\\' || u < 0x20 || u == 0x7f;
         });
}

void CheckStageNames(const DistillConfig& config, const ConfigLocator& root, Checker& checker) {
  // Names identify stages in logs, metrics and checkpoints: the default name of stage i is
  // "stage<i>" (as the boxes name it), which an explicit name can collide with.
  // `train` (a one-stage config) included: its name names files as a stage's does.
  std::map<std::string, TextPosition> names;
  const std::vector<LocatedStage> located = StagesInRunOrder(config, root);
  for (size_t i = 0; i < located.size(); ++i) {
    const StageConfig& stage = *located[i].stage;
    const ConfigLocator& loc = located[i].loc;
    const bool named = !stage.name().empty();
    const std::string name = named ? stage.name() : absl::StrCat("stage", i);
    const TextPosition at = named ? loc.Of("name") : loc.self();
    if (named && !IsPlainName(name)) {
      checker.Add(at, absl::StrCat("stage name \"", absl::CHexEscape(name.substr(0, 80)),
                           "\" must be a plain name ", kPlainNameRule,
                           ": it names the stage's files in the run folder (its checkpoint, "
                           "its teacher cache's spill)"));
    }
    // The run's own checkpoint names: last.pt, best.pt, <stage>_epoch<N>.pt.
    const size_t epoch_at = name.rfind("_epoch");
    const bool epoch_like =
        epoch_at != std::string::npos && epoch_at + 6 < name.size() &&
        std::all_of(name.begin() + static_cast<int64_t>(epoch_at) + 6, name.end(),
                    [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); });
    if (named && (name == "last" || name == "best" || epoch_like)) {
      checker.Add(at, absl::StrCat("stage name \"", name,
                           "\" is the name of a checkpoint the run writes (last.pt, best.pt, "
                           "<stage>_epoch<N>.pt): its stage checkpoint would replace it; give "
                           "the stage another name"));
    }
    if (auto [it, inserted] = names.try_emplace(name, at); !inserted) {
      checker.Add(at, absl::StrCat("duplicate stage name \"", name, "\"",
                           named ? "" : absl::StrCat(" (stage ", i, "'s default name)"),
                           ", also the name of the stage at ", it->second.ToString(),
                           "; give each stage its own name"));
    }
  }
}

}  // namespace config_internal
}  // namespace kd
