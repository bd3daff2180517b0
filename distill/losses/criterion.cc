#include "distill/losses/criterion.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/nearest.h"
#include "base/status_macros.h"
#include "distill/config/kwargs.h"

namespace kd {
namespace {

// What an error of a term is prefixed with (kd::WithContext).
std::string TermContext(const std::string& term) {
  return absl::StrCat("loss term \"", term, "\"");
}

absl::StatusOr<at::Tensor> Resolve(const IoRef& ref, const CriterionInputs& in) {
  if (ref.source() == IoRef::TARGETS) {
    if (!in.targets.defined()) return absl::InvalidArgumentError("the batch has no targets");
    return in.targets;
  }
  if (ref.source() == IoRef::BATCH) {
    std::vector<std::string> keys;
    if (in.supp.isGenericDict()) {
      for (const auto& entry : in.supp.toGenericDict()) {
        if (entry.key().toStringRef() == ref.path() && entry.value().isTensor()) {
          return entry.value().toTensor();
        }
        keys.push_back(entry.key().toStringRef());
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(
        DescribeIoRef(ref), ": the batch has no such tensor; it has ",
        keys.empty() ? "none" : absl::StrCat("\"", absl::StrJoin(keys, "\", \""), "\"")));
  }
  const bool student = ref.source() == IoRef::STUDENT;
  if (ref.source() != IoRef::STUDENT && ref.source() != IoRef::TEACHER) {
    return absl::InvalidArgumentError(absl::StrCat(DescribeIoRef(ref), ": no source"));
  }
  if (ref.io() == IoRef::PARAMETER) {
    const Model* model = student ? in.student_model : in.teacher_model;
    if (model == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(DescribeIoRef(ref), ": no ", student ? "student" : "teacher", " model"));
    }
    std::vector<std::string> names;
    for (const auto& list : {model->NamedParameters(), model->NamedBuffers()}) {
      for (const auto& [name, tensor] : list) {
        if (name == ref.path()) return tensor;
        names.push_back(name);
      }
    }
    return absl::NotFoundError(
        absl::StrCat(DescribeIoRef(ref), ": the ", student ? "student" : "teacher",
                     " has no such parameter or buffer; ", Suggest(ref.path(), names)));
  }
  if (ref.path().empty() && ref.io() == IoRef::OUTPUT &&
      (!ref.key().empty() || ref.has_element())) {
    const c10::IValue& value = student ? in.student_output_value : in.teacher_output_value;
    if (value.isNone()) {
      return absl::InvalidArgumentError(
          absl::StrCat(DescribeIoRef(ref), ": the ", student ? "student" : "teacher",
                       "'s output is not available (no teacher in this run?)"));
    }
    return SelectedTensor(value, ref);
  }
  if (ref.path().empty() && ref.io() == IoRef::OUTPUT) {
    const at::Tensor& output = student ? in.student_output : in.teacher_output;
    if (!output.defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat(DescribeIoRef(ref), ": the ", student ? "student" : "teacher",
                       "'s output is not available (no teacher in this run?)"));
    }
    return output;
  }
  const IoDict* io = student ? in.student_io : in.teacher_io;
  if (io == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(DescribeIoRef(ref), ": no I/O dict"));
  }
  return RecordedTensor(*io, ref);
}

// silverspoon-kd's _combine_losses with magnitude_aware_weighting, one term at a time: the value
// w * L, the gradient w * grad(L) / max(|L|, 1e-8) (the straight-through sum of silverspoon-kd,
// raw.detach() + (normalized - normalized.detach()), splits term by term).
at::Tensor MagnitudeAware(const at::Tensor& value, double weight) {
  const at::Tensor normalized = weight * value / value.detach().abs().clamp_min(1e-8);
  return weight * value.detach() + (normalized - normalized.detach());
}

}  // namespace

absl::StatusOr<at::Tensor> RecordedTensor(const IoDict& io, const IoRef& ref) {
  KD_ASSIGN_OR_RETURN(c10::IValue value,
                      GetIo(io, ref.path(), ref.io() == IoRef::INPUT ? kInput : kOutput));
  return SelectedTensor(std::move(value), ref);
}

absl::StatusOr<at::Tensor> SelectedTensor(c10::IValue value, const IoRef& ref) {
  if (!ref.key().empty()) {
    if (!value.isGenericDict()) {
      return absl::InvalidArgumentError(absl::StrCat(DescribeIoRef(ref), ": the value is a ",
                                                     value.tagKind(),
                                                     ", not a dict: leave `key` out"));
    }
    const c10::impl::GenericDict dict = value.toGenericDict();
    std::vector<std::string> keys;
    c10::IValue found;
    for (const auto& entry : dict) {
      if (!entry.key().isString()) continue;
      keys.push_back(entry.key().toStringRef());
      if (keys.back() == ref.key()) found = entry.value();
    }
    if (found.isNone()) {
      return absl::InvalidArgumentError(absl::StrCat(DescribeIoRef(ref), ": the dict has no key ",
                                                     QuoteName(ref.key()), "; ",
                                                     Suggest(ref.key(), keys)));
    }
    value = std::move(found);
  }
  if (ref.has_element()) {
    const bool sequence = value.isTuple() || value.isList();
    const size_t size = value.isTuple()  ? value.toTupleRef().elements().size()
                        : value.isList() ? value.toListRef().size()
                                         : 0;
    if (!sequence || ref.element() < 0 || static_cast<size_t>(ref.element()) >= size) {
      return absl::InvalidArgumentError(
          absl::StrCat(DescribeIoRef(ref), " is a ", value.tagKind(),
                       sequence ? absl::StrCat(" of ", size, " elements") : "",
                       ": it has no element ", ref.element()));
    }
    value = value.isTuple() ? value.toTupleRef().elements()[ref.element()]
                            : c10::IValue(value.toListRef()[ref.element()]);
  }
  if (!value.isTensor()) {
    return absl::InvalidArgumentError(
        absl::StrCat(DescribeIoRef(ref), " is a ", value.tagKind(), ", not a tensor",
                     value.isTuple() || value.isList() ? ": pick one of its values with `element`"
                     : value.isGenericDict()           ? ": pick one of its entries with `key`"
                                                       : ""));
  }
  return value.toTensor();
}

std::string DescribeIoRef(const IoRef& ref) {
  if (ref.source() == IoRef::TARGETS) return "targets";
  if (ref.source() == IoRef::BATCH) return absl::StrCat("batch supp[", QuoteName(ref.path()), "]");
  const char* role = ref.source() == IoRef::TEACHER ? "teacher" : "student";
  if (ref.io() == IoRef::PARAMETER) return absl::StrCat(role, " parameter ", QuoteName(ref.path()));
  return absl::StrCat(ref.source() == IoRef::TEACHER ? "teacher" : "student", " io[",
                      QuoteName(ref.path()), "][\"", ref.io() == IoRef::INPUT ? "input" : "output",
                      "\"]", ref.key().empty() ? "" : absl::StrCat("[", QuoteName(ref.key()), "]"),
                      ref.has_element() ? absl::StrCat("[", ref.element(), "]") : "");
}

absl::StatusOr<Criterion> Criterion::FromConfig(const CriterionConfig& config) {
  Criterion criterion;
  std::map<std::string, size_t, std::less<>> groups;
  for (const LossGroupConfig& group : config.groups()) {
    if (group.name().empty()) {
      return absl::InvalidArgumentError("groups: a group without a name: give `name`");
    }
    if (!groups.emplace(group.name(), criterion.groups_.size()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("groups: two groups named ", QuoteName(group.name())));
    }
    criterion.groups_.push_back({group.name(), group.has_weight() ? group.weight() : 1.0});
  }
  // A single term has nothing to balance; silverspoon-kd, too, weighs by magnitude only where
  // it combines the soft and the hard loss (alpha > 0). Within a group it weighs every term.
  int64_t components = static_cast<int64_t>(config.groups_size());
  for (const LossTermConfig& term : config.terms()) components += term.group().empty() ? 1 : 0;
  criterion.magnitude_aware_ = config.magnitude_aware_weighting() && components > 1;
  criterion.magnitude_aware_in_groups_ = config.magnitude_aware_weighting();
  for (const LossTermConfig& term : config.terms()) {
    Term built;
    built.name = term.name().empty() ? term.key() : term.name();
    built.weight = term.has_weight() ? term.weight() : 1.0;
    built.warmup_epochs = term.warmup_epochs();
    if (!term.group().empty()) {
      auto found = groups.find(term.group());
      if (found == groups.end()) {
        std::vector<std::string> names;
        for (const auto& [name, index] : groups) names.push_back(name);
        return WithContext(TermContext(built.name), absl::InvalidArgumentError(absl::StrCat(
                                                        "group ", QuoteName(term.group()),
                                                        " is not in the criterion's "
                                                        "groups; ",
                                                        Suggest(term.group(), names))));
      }
      built.group = static_cast<int>(found->second);
    }
    // The key, then the kwargs against the loss's contract (PluginKwargs runs its own check
    // too), then the factory: each checked once.
    absl::StatusOr<const LossFactory*> factory = LossRegistry().Get(term.key());
    if (!factory.ok()) return WithContext(TermContext(built.name), factory.status());
    absl::StatusOr<Kwargs> kwargs = PluginKwargs(LossRegistry(), term.key(), term.kwargs(),
                                                 absl::StrCat("loss \"", term.key(), "\""));
    if (!kwargs.ok()) return WithContext(TermContext(built.name), kwargs.status());
    absl::StatusOr<std::unique_ptr<Loss>> loss =
        (**factory)(WithPluginDefaults(LossRegistry(), term.key(), *kwargs));
    if (!loss.ok()) return WithContext(TermContext(built.name), loss.status());
    built.loss = std::move(*loss);
    built.inputs.assign(term.inputs().begin(), term.inputs().end());
    criterion.terms_.push_back(std::move(built));
  }
  return criterion;
}

absl::StatusOr<CriterionResult> Criterion::Forward(const CriterionInputs& inputs) const {
  CriterionResult result;
  std::vector<at::Tensor> group_sums(groups_.size());
  auto add = [](at::Tensor& sum, const at::Tensor& value) {
    sum = sum.defined() ? sum + value : value;
  };
  for (const Term& term : terms_) {
    std::map<std::string, at::Tensor, std::less<>> args;
    for (const IoRef& ref : term.inputs) {
      absl::StatusOr<at::Tensor> value = Resolve(ref, inputs);
      if (!value.ok()) return WithContext(TermContext(term.name), value.status());
      args.emplace(ref.arg(), *std::move(value));
    }
    absl::StatusOr<at::Tensor> value = term.loss->Forward(LossInputs(std::move(args)));
    if (!value.ok()) {
      // Described only when needed: formatting every step would cost more than small losses.
      std::vector<std::string> described;
      for (const IoRef& ref : term.inputs) {
        const at::Tensor value = Resolve(ref, inputs).value_or(at::Tensor());
        described.push_back(
            absl::StrCat(ref.arg(), " = ", DescribeIoRef(ref), " ", ShapeString(value), " ",
                         value.defined() ? c10::toString(value.scalar_type()) : "undefined"));
      }
      return WithContext(
          TermContext(term.name),
          absl::Status(value.status().code(), absl::StrCat(value.status().message(), " (inputs: ",
                                                           absl::StrJoin(described, ", "), ")")));
    }
    // mdistiller's warm-up: min(epoch / warmup, 1), its epochs counted from 1.
    const double weight =
        term.warmup_epochs > 0
            ? term.weight * std::min(1.0, static_cast<double>(inputs.epoch + 1) /
                                              static_cast<double>(term.warmup_epochs))
            : term.weight;
    const bool by_magnitude = term.group >= 0 ? magnitude_aware_in_groups_ : magnitude_aware_;
    const at::Tensor weighted = by_magnitude  ? MagnitudeAware(*value, weight)
                                : weight == 1 ? *value
                                              : weight * *value;
    add(term.group >= 0 ? group_sums[term.group] : result.total, weighted);
    result.terms.push_back({term.name, weight, *value});
  }
  // Each group as one term: its sum's value (with magnitude weighing, the raw weighted sum,
  // silverspoon-kd's accumulator) weighed like a term.
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (!group_sums[g].defined()) continue;
    const double weight = groups_[g].weight;
    add(result.total, magnitude_aware_ ? MagnitudeAware(group_sums[g], weight)
                      : weight == 1    ? group_sums[g]
                                       : weight * group_sums[g]);
  }
  return result;
}

std::vector<at::Tensor> Criterion::Parameters() const {
  std::vector<at::Tensor> out;
  for (const Term& term : terms_) {
    for (const at::Tensor& p : term.loss->Parameters()) out.push_back(p);
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> Criterion::NamedState() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const Term& term : terms_) {
    for (const auto& [name, tensor] : term.loss->NamedState()) {
      out.emplace_back(absl::StrCat(term.name, "/", name), tensor);
    }
  }
  return out;
}

}  // namespace kd
