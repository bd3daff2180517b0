// torchdistill's criterion: WeightedSumLoss's sub_terms, each a loss with its wiring (a
// SimpleLossWrapper's input/target, or the loss's own module-path kwargs through its
// TorchdistillLossRule) and a weight, as libkd's weighted terms.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/registry.h"
#include "base/status_macros.h"
#include "distill/torchdistill/import_context.h"
#include "distill/losses/torchdistill_rule.h"

namespace kd {
namespace torchdistill {
namespace {

using Kind = YamlValue::Kind;

// A recorded value by torchdistill's (module path, io): '.' is the model's output.
absl::StatusOr<IoRef> ValueRef(const Context& context, const std::string& arg, bool from_teacher,
                               const YamlValue& path, const YamlValue* io,
                               const std::string& default_io, const std::string& what) {
  IoRef ref;
  ref.set_arg(arg);
  ref.set_source(from_teacher ? IoRef::TEACHER : IoRef::STUDENT);
  KD_ASSIGN_OR_RETURN(std::string module, Context::String(path, what + " module path"));
  module = context.ModelPath(from_teacher, module);
  std::string io_name = default_io;
  if (io != nullptr && io->kind != Kind::kNull) {
    KD_ASSIGN_OR_RETURN(io_name, Context::String(*io, what + " io"));
  }
  if (io_name != "output" && io_name != "input") {
    return Context::WrongType(io != nullptr ? *io : path, what + " io", "'output' or 'input'");
  }
  if (module == "." || module.empty()) {
    if (io_name == "input") {
      return absl::InvalidArgumentError(
          absl::StrCat(path.Where(), ": ", what,
                       ": the input of the whole model ('.') is the batch: libkd "
                       "reads it as source BATCH, which this importer does not "
                       "write; write the term's input by hand"));
    }
    return ref;  // the model's output
  }
  ref.set_path(module);
  if (io_name == "input") ref.set_io(IoRef::INPUT);
  return ref;
}

// The wrapper's kwargs: each names an argument of the loss (input, target) and where it comes
// from ({uses_label: true}, or {is_from_teacher, module_path, io}).
absl::Status WrapperInputs(Context& context, const YamlValue& kwargs, const std::string& what,
                           LossTermConfig* term) {
  if (kwargs.kind != Kind::kMap) return Context::WrongType(kwargs, what, "a mapping");
  for (const auto& [arg, source] : kwargs.entries) {
    const std::string at = absl::StrCat(what, ".", arg);
    KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(source.get(), at));
    if (const YamlValue* label = keys.Take("uses_label"); label != nullptr && label->boolean) {
      IoRef* ref = term->add_inputs();
      ref->set_arg(arg);
      ref->set_source(IoRef::TARGETS);
      keys.Finish(context, "a target from the labels takes nothing else");
      continue;
    }
    const YamlValue* teacher = keys.Take("is_from_teacher");
    const YamlValue* path = keys.Take("module_path");
    const YamlValue* io = keys.Take("io");
    keys.Finish(context, "a wrapped loss's argument has is_from_teacher, module_path, io");
    if (path == nullptr) return Context::WrongType(*source, at + ".module_path", "given");
    bool from_teacher = false;
    if (teacher != nullptr && teacher->kind != Kind::kNull) {
      KD_ASSIGN_OR_RETURN(from_teacher, Context::Bool(*teacher, at + ".is_from_teacher"));
    }
    KD_ASSIGN_OR_RETURN(IoRef ref, ValueRef(context, arg, from_teacher, *path, io, "output", at));
    *term->add_inputs() = std::move(ref);
  }
  return absl::OkStatus();
}

// A loss configured by its own kwargs, through its import rule.
absl::Status ApplyRule(Context& context, const TorchdistillLossRule& rule, const YamlValue* kwargs,
                       const std::string& what, LossTermConfig term, CriterionConfig* out) {
  if (!rule.libkd_key.empty()) term.set_key(rule.libkd_key);
  static const YamlValue kEmpty{.kind = Kind::kMap};
  const YamlValue& given = kwargs != nullptr && kwargs->kind == Kind::kMap ? *kwargs : kEmpty;
  if (kwargs != nullptr && kwargs->kind != Kind::kMap && kwargs->kind != Kind::kNull) {
    return Context::WrongType(*kwargs, what + ".kwargs", "a mapping");
  }
  // The kwargs the rule wires; the rest pass on (renamed, flattened) to the loss's contract.
  std::vector<std::string> wired;
  for (const auto& v : rule.values) {
    wired.insert(wired.end(), {v.path_kwarg, v.io_kwarg, v.from_teacher_kwarg});
  }
  if (!rule.pairs_kwarg.empty()) wired.push_back(rule.pairs_kwarg);
  for (const auto& [name, why] : rule.dropped) {
    if (const YamlValue* v = given.Find(name)) context.Note(*v, what + ".kwargs." + name, why);
    wired.push_back(name);
  }
  YamlValue passed = given;
  passed.entries.clear();
  for (const auto& [name, value] : given.entries) {
    if (std::find(wired.begin(), wired.end(), name) != wired.end()) continue;
    std::string libkd_name = name;
    for (const auto& [from, to] : rule.renamed) {
      if (from == name) libkd_name = to;
    }
    bool flattened = false;
    for (const auto& [dict, key_name] : rule.flattened) {
      if (dict != libkd_name || value->kind != Kind::kMap) continue;
      flattened = true;
      for (const auto& [inner, inner_value] : value->entries) {
        passed.entries.emplace_back(inner == "key" || inner == "type" ? key_name : inner,
                                    inner_value);
      }
    }
    if (!flattened) passed.entries.emplace_back(libkd_name, value);
  }
  KD_RETURN_IF_ERROR(
      context.Kwargs(&passed, "loss", term.key(), what + ".kwargs", term.mutable_kwargs()));
  for (const auto& v : rule.values) {
    const YamlValue* path = given.Find(v.path_kwarg);
    // torchdistill's default path, placed where the kwargs are
    const YamlValue default_path{.kind = Kind::kString,
                                 .text = v.default_path,
                                 .file = given.file,
                                 .line = given.line,
                                 .column = given.column};
    if (path == nullptr && !v.default_path.empty()) path = &default_path;
    if (path == nullptr && rule.outputs_by_default) {
      context.Note(given, absl::StrCat(what, ".kwargs.", v.path_kwarg),
                   "not given (torchdistill 1.x requires it): the model's output, as torchdistill "
                   "0.x's form of the loss read it");
      IoRef* ref = term.add_inputs();
      ref->set_arg(v.arg);
      ref->set_source(v.from_teacher ? IoRef::TEACHER : IoRef::STUDENT);
      continue;
    }
    if (path == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(given.Where(), ": ", what, ".kwargs needs ",
                                                     v.path_kwarg, " (torchdistill's too)"));
    }
    bool from_teacher = v.from_teacher;
    if (const YamlValue* whose =
            v.from_teacher_kwarg.empty() ? nullptr : given.Find(v.from_teacher_kwarg);
        whose != nullptr && whose->kind != Kind::kNull) {
      KD_ASSIGN_OR_RETURN(from_teacher,
                          Context::Bool(*whose, what + ".kwargs." + v.from_teacher_kwarg));
    }
    KD_ASSIGN_OR_RETURN(IoRef ref, ValueRef(context, v.arg, from_teacher, *path,
                                            v.io_kwarg.empty() ? nullptr : given.Find(v.io_kwarg),
                                            v.default_io, what + ".kwargs." + v.path_kwarg));
    if (v.element >= 0) ref.set_element(v.element);
    *term.add_inputs() = std::move(ref);
  }
  if (rule.reads_targets) {
    IoRef* ref = term.add_inputs();
    ref->set_arg("targets");
    ref->set_source(IoRef::TARGETS);
  }
  for (const auto& [arg, key] : rule.batch_inputs) {
    IoRef* ref = term.add_inputs();
    ref->set_arg(arg);
    ref->set_source(IoRef::BATCH);
    ref->set_path(key);
  }
  if (rule.pairs_kwarg.empty()) {
    *out->add_terms() = std::move(term);
    return absl::OkStatus();
  }
  const YamlValue* pairs = given.Find(rule.pairs_kwarg);
  const std::string pairs_what = absl::StrCat(what, ".kwargs.", rule.pairs_kwarg);
  if (pairs == nullptr || pairs->kind != Kind::kMap) {
    return pairs == nullptr ? absl::InvalidArgumentError(
                                  absl::StrCat(given.Where(), ": ", pairs_what, " is missing"))
                            : Context::WrongType(*pairs, pairs_what, "a mapping of pairs");
  }
  const double weight = term.has_weight() ? term.weight() : 1.0;
  for (const auto& [pair_name, pair] : pairs->entries) {
    const std::string at = absl::StrCat(pairs_what, ".", pair_name);
    KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(pair.get(), at));
    LossTermConfig pair_term = term;
    pair_term.set_name(absl::StrCat(term.name(), "_", pair_name));
    double factor = 1;
    if (const YamlValue* w = keys.TakeOr(context, "weight", "factor");
        w != nullptr && w->kind != Kind::kNull) {
      KD_ASSIGN_OR_RETURN(factor, Context::Number(*w, at + ".weight"));
    }
    if (weight * factor != 1.0) pair_term.set_weight(weight * factor);
    for (const auto& member : rule.pair_members) {
      const YamlValue* value = keys.Take(member.key);
      if (value == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(pair->Where(), ": ", at, " needs ", member.key, " (its path and io)"));
      }
      KD_ASSIGN_OR_RETURN(Keys value_keys, Keys::Of(value, at + "." + member.key));
      const YamlValue* path = value_keys.Take("path");
      const YamlValue* io = value_keys.Take("io");
      value_keys.Finish(context, "a pair's value has path and io");
      if (path == nullptr) return Context::WrongType(*value, at + "." + member.key, "{path, io}");
      KD_ASSIGN_OR_RETURN(IoRef ref, ValueRef(context, member.arg, member.from_teacher, *path, io,
                                              "output", at + "." + member.key));
      if (member.elements.empty()) {
        *pair_term.add_inputs() = std::move(ref);
      }
      for (const auto& [arg, element] : member.elements) {
        IoRef* picked = pair_term.add_inputs();
        *picked = ref;
        picked->set_arg(arg);
        picked->set_element(element);
      }
    }
    keys.Finish(context, "libkd's pairs take their members and a weight");
    *out->add_terms() = std::move(pair_term);
  }
  return absl::OkStatus();
}

absl::Status ImportTerm(Context& context, const std::string& name, const YamlValue& config,
                        const std::string& what, CriterionConfig* out) {
  KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(&config, what));
  const YamlValue* criterion = keys.Take("criterion");
  const YamlValue* wrapper = keys.Take("criterion_wrapper");
  const YamlValue* weight = keys.Take("weight");
  keys.Finish(context, "a sub-term has criterion, criterion_wrapper and weight");
  if (criterion == nullptr) return Context::WrongType(config, what + ".criterion", "given");
  KD_ASSIGN_OR_RETURN(Keys loss_keys, Keys::Of(criterion, what + ".criterion"));
  const YamlValue* key = loss_keys.Take("key");
  const YamlValue* kwargs = loss_keys.Take("kwargs");
  loss_keys.Finish(context, "a loss has key and kwargs");
  if (key == nullptr) return Context::WrongType(*criterion, what + ".criterion.key", "given");
  KD_ASSIGN_OR_RETURN(std::string loss, Context::String(*key, what + ".criterion.key"));
  LossTermConfig term;
  term.set_name(name);
  term.set_key(loss);
  if (weight != nullptr && weight->kind != Kind::kNull) {
    KD_ASSIGN_OR_RETURN(double w, Context::Number(*weight, what + ".weight"));
    if (w != 1.0) term.set_weight(w);
  }
  if (wrapper != nullptr && wrapper->kind != Kind::kNull) {
    KD_ASSIGN_OR_RETURN(Keys wrapper_keys, Keys::Of(wrapper, what + ".criterion_wrapper"));
    const YamlValue* wrapper_key = wrapper_keys.Take("key");
    const YamlValue* wrapper_kwargs = wrapper_keys.Take("kwargs");
    wrapper_keys.Finish(context, "a wrapper has key and kwargs");
    if (wrapper_key == nullptr || wrapper_key->text != "SimpleLossWrapper") {
      context.Unsupported(wrapper_key != nullptr ? *wrapper_key : *wrapper,
                          what + ".criterion_wrapper " +
                              (wrapper_key != nullptr ? wrapper_key->text : std::string()),
                          "libkd wires a loss's arguments as SimpleLossWrapper does (term "
                          "inputs); DictLossWrapper's per-key weights have no form");
      return absl::OkStatus();
    }
    KD_RETURN_IF_ERROR(
        context.Kwargs(kwargs, "loss", loss, what + ".criterion.kwargs", term.mutable_kwargs()));
    if (wrapper_kwargs == nullptr) {
      return Context::WrongType(*wrapper, what + ".criterion_wrapper.kwargs", "given");
    }
    KD_RETURN_IF_ERROR(
        WrapperInputs(context, *wrapper_kwargs, what + ".criterion_wrapper.kwargs", &term));
    *out->add_terms() = std::move(term);
    return absl::OkStatus();
  }
  absl::StatusOr<const TorchdistillLossRule*> rule = TorchdistillLossRules().Get(loss);
  if (!rule.ok()) {
    context.UnsupportedPlugin(
        *key, absl::StrCat(what, ".criterion ", loss), "loss", loss,
        absl::StrCat("libkd has \"", loss,
                     "\" but no torchdistill import rule for it "
                     "(TorchdistillLossRule, distill/losses/torchdistill_rule.h): write its "
                     "term's inputs by hand"),
        "libkd has no such loss: ");
    return absl::OkStatus();
  }
  return ApplyRule(context, **rule, kwargs, what + ".criterion", std::move(term), out);
}

}  // namespace

absl::Status ImportCriterion(Context& context, const YamlValue& criterion, const std::string& what,
                             CriterionConfig* out) {
  if (criterion.kind == Kind::kMap && criterion.Find("type") != nullptr &&
      criterion.Find("key") == nullptr) {
    KD_ASSIGN_OR_RETURN(std::shared_ptr<YamlValue> rewritten,
                        ZeroXCriterionAsOneX(context, criterion, what));
    return ImportCriterion(context, *rewritten, what, out);
  }
  KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(&criterion, what));
  const YamlValue* key = keys.Take("key");
  const YamlValue* kwargs = keys.Take("kwargs");
  keys.Finish(context, "a criterion has key and kwargs");
  if (key == nullptr) return Context::WrongType(criterion, what + ".key", "given");
  KD_ASSIGN_OR_RETURN(std::string name, Context::String(*key, what + ".key"));
  if (name != "WeightedSumLoss") {
    context.Unsupported(*key, absl::StrCat(what, ".key ", name),
                        "libkd's criterion is torchdistill's WeightedSumLoss (a weighted sum of "
                        "terms); write the loss as its one sub-term");
    return absl::OkStatus();
  }
  KD_ASSIGN_OR_RETURN(Keys sum_keys, Keys::Of(kwargs, what + ".kwargs"));
  if (const YamlValue* model_term = sum_keys.Take("model_term");
      model_term != nullptr && model_term->kind != Kind::kNull) {
    context.Unsupported(*model_term, what + ".kwargs.model_term",
                        "libkd's terms read the I/O dicts; a loss the model returns itself has "
                        "no term");
  }
  const YamlValue* sub_terms = sum_keys.Take("sub_terms");
  sum_keys.Finish(context, "WeightedSumLoss takes sub_terms (and model_term)");
  if (sub_terms == nullptr || sub_terms->kind != Kind::kMap) {
    return sub_terms == nullptr
               ? absl::OkStatus()
               : Context::WrongType(*sub_terms, what + ".kwargs.sub_terms", "a mapping of terms");
  }
  for (const auto& [term_name, term] : sub_terms->entries) {
    KD_RETURN_IF_ERROR(ImportTerm(context, term_name, *term,
                                  absl::StrCat(what, ".kwargs.sub_terms.", term_name), out));
  }
  return absl::OkStatus();
}

}  // namespace torchdistill
}  // namespace kd
