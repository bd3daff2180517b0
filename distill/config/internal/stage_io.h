// What one stage of a config records: the module inputs and outputs its forward hooks and
// auxiliary modules put in the I/O dicts, which loss terms and auxiliary modules may read.
#ifndef LIBKD_DISTILL_CONFIG_INTERNAL_STAGE_IO_H_
#define LIBKD_DISTILL_CONFIG_INTERNAL_STAGE_IO_H_

#include <set>
#include <string>
#include <vector>

#include "distill/config/distill_config.pb.h"

namespace kd {
namespace config_internal {

// "teacher" or "student", as messages name the model an I/O reference reads.
inline const char* RoleName(IoRef::Source source) {
  return source == IoRef::TEACHER ? "teacher" : "student";
}

// What the forward hooks and auxiliary modules of one model record in one stage:
// path -> (input?, output?). The model's own output is always recorded.
class RecordedIo {
 public:
  explicit RecordedIo(const StageModelConfig& model) {
    output_.insert("");
    for (const ForwardHookConfig& hook : model.forward_hooks()) {
      if (hook.requires_input()) input_.insert(hook.module_path());
      if (hook.requires_output()) output_.insert(hook.module_path());
    }
    for (const AuxiliaryModuleConfig& aux : model.auxiliary_modules()) {
      if (!aux.name().empty()) output_.insert(aux.name());
    }
  }

  bool Has(const std::string& path, IoRef::Io io) const {
    return (io == IoRef::INPUT ? input_ : output_).count(path) > 0;
  }
  std::vector<std::string> Paths(IoRef::Io io) const {
    const std::set<std::string>& paths = io == IoRef::INPUT ? input_ : output_;
    return std::vector<std::string>(paths.begin(), paths.end());
  }

 private:
  std::set<std::string> input_;
  std::set<std::string> output_;
};

// What a stage's inputs are checked against.
struct StageContext {
  bool has_teacher = false;
  const RecordedIo* teacher = nullptr;  // null without a teacher
  const RecordedIo* student = nullptr;
};

}  // namespace config_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_CONFIG_INTERNAL_STAGE_IO_H_
