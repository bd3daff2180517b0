// How a torchdistill loss's config becomes libkd loss terms: each loss that torchdistill also
// has declares its rule where it registers (KD_REGISTER(TorchdistillLossRules(), "ATLoss",
// TorchdistillLossRule{...}, kAnyKwargs)), and //tools:import_torchdistill applies it
// (distill/torchdistill/importer.h), so a new loss brings its import rule with it.
//
// torchdistill's losses name the recorded values they read in their kwargs; libkd's read them
// as term inputs (LossTermConfig.inputs):
//   KDLoss(student_module_path: '.', student_module_io: 'output', teacher_module_path: '.', ...)
//     -> terms { key: "KDLoss" inputs { arg: "student" source: STUDENT } ... }
//   ATLoss(at_pairs: {pair1: {student: {path: 'layer3', io: 'output'}, teacher: {...},
//                             weight: 1}, ...})
//     -> one ATLoss term per pair, weighted by the sub-term's weight times the pair's
// Kwargs a rule does not name pass through under their own names (renamed ones under libkd's),
// and the importer checks them against the libkd loss's kwargs contract.
#ifndef LIBKD_DISTILL_LOSSES_TORCHDISTILL_RULE_H_
#define LIBKD_DISTILL_LOSSES_TORCHDISTILL_RULE_H_

#include <string>
#include <utility>
#include <vector>

#include "base/registry.h"

namespace kd {

struct TorchdistillLossRule {
  // A recorded value named by a pair of kwargs: the module path ('.' or '': the model's
  // output) and, optionally, its io ('output' or 'input'; `default_io` when not given).
  struct Value {
    std::string arg;            // the libkd term input it fills
    bool from_teacher = false;  // else the student's
    std::string path_kwarg;     // "student_module_path"
    std::string io_kwarg;       // "student_module_io"; "" : the io is `default_io`
    std::string default_io = "output";
    // The path when the kwarg is not given (torchdistill's default; FTLoss's "paraphraser").
    std::string default_path;
    // The value of a recorded tuple it takes (IoRef.element; -1: the whole value), where the
    // torchdistill loss unpacks one (HierarchicalContextLoss's student fusion: its output, 0).
    int element = -1;
    // A boolean kwarg saying whose value it is instead (RegularizationLoss's is_from_teacher;
    // `from_teacher` when not given).
    std::string from_teacher_kwarg;
  };
  // A member of each pair of `pairs_kwarg`: the pair's entry `key` is a dict {path, io}.
  struct PairMember {
    std::string key;  // "student"
    std::string arg;  // the libkd term input it fills
    bool from_teacher = false;
    // Or several inputs, each a value of the recorded tuple (VID's regressor: its mean as
    // "pred_mean", element 0, its variance as "pred_var", element 1).
    std::vector<std::pair<std::string, int>> elements;
  };

  // libkd's loss key (empty: the same as torchdistill's).
  std::string libkd_key;
  std::vector<Value> values;
  // Whether the loss reads the labels (torchdistill's `targets` argument), as input "targets".
  bool reads_targets = false;
  // Inputs from the batch's supplementary dict (LossTermConfig input source BATCH): the input's
  // name and the dict's key (CRD's "pos_idx" and "contrast_idx", which torchdistill reads as the
  // input of the student wrapper's empty module).
  std::vector<std::pair<std::string, std::string>> batch_inputs;
  // Whether a value whose path kwarg is not given is the model's output (with a note), as
  // torchdistill 0.x's form of the loss read the two models' outputs; else it is an error.
  bool outputs_by_default = false;
  // A dict of pairs (torchdistill's at_pairs, fsp_pairs, feature_pairs): one term per pair;
  // a pair's "weight" (default 1) multiplies the term's.
  std::string pairs_kwarg;
  std::vector<PairMember> pair_members;
  // torchdistill's kwarg name -> libkd's.
  std::vector<std::pair<std::string, std::string>> renamed;
  // Dict kwargs (after renaming) whose entries become kwargs of their own (CCKD's kernel_config:
  // {type, gamma, max_p}), the dict's "type" or "key" under the name given here.
  std::vector<std::pair<std::string, std::string>> flattened;
  // Kwargs torchdistill reads that libkd's loss does not need, with why (dropped, and reported
  // as a note).
  std::vector<std::pair<std::string, std::string>> dropped;

  // The common forms: "student" and "teacher" from {student,teacher}_module_{path,io}
  // (`prefix` "student_logit" reads student_logit_module_path, ...); from two path kwargs
  // (outputs; with torchdistill's default paths where it has them); one term per pair of `kwarg`,
  // members named as the inputs they fill (those from "teacher" come from the teacher).
  static TorchdistillLossRule ModuleIoPair(const std::string& student_prefix = "student",
                                           const std::string& teacher_prefix = "teacher",
                                           const std::string& student_arg = "student",
                                           const std::string& teacher_arg = "teacher");
  static TorchdistillLossRule PathPair(const std::string& student_kwarg,
                                       const std::string& teacher_kwarg,
                                       const std::string& student_default = "",
                                       const std::string& teacher_default = "");
  static TorchdistillLossRule Pairs(std::string kwarg, std::vector<std::string> members);
};

// torchdistill's loss key -> its rule ("torchdistill_loss_rule" registry kind).
Registry<TorchdistillLossRule>& TorchdistillLossRules();

}  // namespace kd

#endif  // LIBKD_DISTILL_LOSSES_TORCHDISTILL_RULE_H_
