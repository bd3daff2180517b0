// The weighted sum of loss terms a stage's config describes (CriterionConfig), reading each
// term's inputs from the student's and teacher's I/O dicts, their model outputs and the targets.
//
//   KD_ASSIGN_OR_RETURN(kd::Criterion criterion, kd::Criterion::FromConfig(stage.criterion()));
//   KD_ASSIGN_OR_RETURN(kd::CriterionResult loss,
//                       criterion.Forward({.student_io = &s_io, .teacher_io = &t_io,
//                                          .student_output = s_out, .teacher_output = t_out,
//                                          .targets = labels}));
//   loss.total.backward();   // loss.terms: each term's name, weight and unweighted value
#ifndef LIBKD_DISTILL_LOSSES_CRITERION_H_
#define LIBKD_DISTILL_LOSSES_CRITERION_H_

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "distill/config/distill_config.pb.h"
#include "distill/losses/loss.h"
#include "hooks/io_dict.h"
#include "hooks/model.h"

namespace kd {

// What a step's losses read. Unset pointers / undefined tensors mean "not available" (a run
// without a teacher; an unlabelled batch).
struct CriterionInputs {
  const IoDict* student_io = nullptr;
  const IoDict* teacher_io = nullptr;
  // For references to parameters and buffers (io: PARAMETER).
  const Model* student_model = nullptr;
  const Model* teacher_model = nullptr;
  at::Tensor student_output;  // path "" of STUDENT (a dict output's "logits")
  at::Tensor teacher_output;  // path "" of TEACHER
  // The outputs as the models returned them, for IoRef.key / element on path "" (a dict or
  // tuple output); None: only the tensors above.
  c10::IValue student_output_value, teacher_output_value;
  at::Tensor targets;  // TARGETS
  // The batch's supplementary dict, Dict[str, Tensor] (BATCH); None: none.
  c10::IValue supp;
  // The stage's epoch (from 0), for terms with warmup_epochs.
  int64_t epoch = 0;
};

struct TermValue {
  std::string name;
  double weight = 1;  // this step's: the config's, times the warm-up's factor
  at::Tensor value;   // unweighted
};

struct CriterionResult {
  at::Tensor total;  // sum of weight * value
  std::vector<TermValue> terms;
};

class Criterion {
 public:
  // Builds every term's loss (registry key, kwargs checked against its contract). Errors name
  // the term.
  static absl::StatusOr<Criterion> FromConfig(const CriterionConfig& config);

  // Errors name the term, the I/O reference and what is there (a path not recorded, a
  // non-tensor value, shapes a loss refuses).
  absl::StatusOr<CriterionResult> Forward(const CriterionInputs& inputs) const;

  // Parameters the terms' losses own (for the optimizer and checkpoints).
  std::vector<at::Tensor> Parameters() const;
  // Every tensor the terms' losses own, named "<term>/<name>" (for checkpoints).
  std::vector<std::pair<std::string, at::Tensor>> NamedState() const;

 private:
  struct Term {
    std::string name;
    double weight = 1;
    int64_t warmup_epochs = 0;
    std::shared_ptr<Loss> loss;
    std::vector<IoRef> inputs;
    int group = -1;  // index in groups_; -1: a term of its own
  };
  struct Group {
    std::string name;
    double weight = 1;
  };
  std::vector<Term> terms_;
  std::vector<Group> groups_;
  // CriterionConfig.magnitude_aware_weighting, among the criterion's terms (two or more) and
  // within groups.
  bool magnitude_aware_ = false, magnitude_aware_in_groups_ = false;
};

// "student io[\"layer2\"][\"output\"]", "teacher parameter \"fc.weight\"", "targets": how
// messages name a reference.
std::string DescribeIoRef(const IoRef& ref);

// The tensor `ref` names in `io` (a model's I/O dict): io[path]["input"|"output"], its `key`
// and `element` if set. InvalidArgument naming the reference when it is missing, has no such
// key or element or is not a tensor.
absl::StatusOr<at::Tensor> RecordedTensor(const IoDict& io, const IoRef& ref);

// `value`'s entry `ref.key()` (a dict's, if set), then its element `ref.element()` (a tuple's
// or list's, if set), as a tensor; errors as RecordedTensor's.
absl::StatusOr<at::Tensor> SelectedTensor(c10::IValue value, const IoRef& ref);

}  // namespace kd

#endif  // LIBKD_DISTILL_LOSSES_CRITERION_H_
