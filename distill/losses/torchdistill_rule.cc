#include "distill/losses/torchdistill_rule.h"

namespace kd {

TorchdistillLossRule TorchdistillLossRule::ModuleIoPair(const std::string& student_prefix,
                                                        const std::string& teacher_prefix,
                                                        const std::string& student_arg,
                                                        const std::string& teacher_arg) {
  return {.values = {{.arg = student_arg,
                      .path_kwarg = student_prefix + "_module_path",
                      .io_kwarg = student_prefix + "_module_io"},
                     {.arg = teacher_arg,
                      .from_teacher = true,
                      .path_kwarg = teacher_prefix + "_module_path",
                      .io_kwarg = teacher_prefix + "_module_io"}}};
}

TorchdistillLossRule TorchdistillLossRule::PathPair(const std::string& student_kwarg,
                                                    const std::string& teacher_kwarg,
                                                    const std::string& student_default,
                                                    const std::string& teacher_default) {
  return {
      .values = {{.arg = "student", .path_kwarg = student_kwarg, .default_path = student_default},
                 {.arg = "teacher",
                  .from_teacher = true,
                  .path_kwarg = teacher_kwarg,
                  .default_path = teacher_default}}};
}

TorchdistillLossRule TorchdistillLossRule::Pairs(std::string kwarg,
                                                 std::vector<std::string> members) {
  TorchdistillLossRule rule{.pairs_kwarg = std::move(kwarg)};
  for (std::string& member : members) {
    const bool teacher = member.starts_with("teacher");
    rule.pair_members.push_back({.key = member, .arg = std::move(member), .from_teacher = teacher});
  }
  return rule;
}

Registry<TorchdistillLossRule>& TorchdistillLossRules() {
  static Registry<TorchdistillLossRule>* const registry =
      NewGlobalRegistry<TorchdistillLossRule>("torchdistill_loss_rule");
  return *registry;
}

}  // namespace kd
