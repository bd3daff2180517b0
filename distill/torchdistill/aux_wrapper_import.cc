// torchdistill's auxiliary model wrappers (a stage model's auxiliary_model_wrapper) as libkd
// auxiliary modules through the TorchdistillAuxRule the libkd module declares where it
// registers; EmptyModule as the identity forward process.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/registry.h"
#include "base/status_macros.h"
#include "distill/boxes/torchdistill_aux_rule.h"
#include "distill/torchdistill/import_context.h"

namespace kd {
namespace torchdistill {
namespace {

using Kind = YamlValue::Kind;

// An auxiliary module's input: {path, io} or a path (its output), in the wrapped model's names.
absl::Status AuxInput(Context& context, const YamlValue& input, const std::string& what,
                      bool teacher, AuxiliaryModuleConfig* module) {
  const YamlValue* path = input.kind == Kind::kMap ? input.Find("path") : &input;
  const YamlValue* io = input.kind == Kind::kMap ? input.Find("io") : nullptr;
  if (path == nullptr) return Context::WrongType(input, what, "{path, io}");
  KD_ASSIGN_OR_RETURN(std::string module_path, Context::String(*path, what + " path"));
  module->mutable_input()->set_path(context.ModelPath(teacher, module_path));
  if (io != nullptr && io->kind == Kind::kString && io->text == "input") {
    module->mutable_input()->set_io(IoRef::INPUT);
  }
  return absl::OkStatus();
}

// A wrapper that adds a module per entry of a dict kwarg (VID's regressors).
absl::Status ImportAuxModules(Context& context, const TorchdistillAuxRule& rule,
                              const YamlValue& kwargs, const std::string& what, bool teacher,
                              StageModelConfig* out) {
  const YamlValue* modules = kwargs.Find(rule.modules_kwarg);
  const std::string at = absl::StrCat(what, ".kwargs.", rule.modules_kwarg);
  if (modules == nullptr || modules->kind != Kind::kMap) {
    return modules == nullptr ? absl::InvalidArgumentError(
                                    absl::StrCat(kwargs.Where(), ": ", what, ".kwargs needs ",
                                                 rule.modules_kwarg, " (torchdistill's too)"))
                              : Context::WrongType(*modules, at, "a mapping");
  }
  for (const auto& [kwarg, value] : kwargs.entries) {
    if (kwarg != rule.modules_kwarg) {
      context.Unsupported(
          *value, absl::StrCat(what, ".kwargs.", kwarg),
          absl::StrCat("the wrapper's modules take their own kwargs (", rule.modules_kwarg, ")"));
    }
  }
  // Wrapper paths are read before a module is named: every entry is known first.
  for (const auto& [entry, _] : modules->entries) {
    context.wrapped(teacher).aux_names[rule.module_path_prefix + entry] = entry;
  }
  for (const auto& [entry, config] : modules->entries) {
    const std::string entry_what = absl::StrCat(at, ".", entry);
    KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(config.get(), entry_what));
    AuxiliaryModuleConfig* module = out->add_auxiliary_modules();
    module->set_name(entry);
    module->set_key(rule.module_key);
    const YamlValue* path = keys.Take("path");
    if (path == nullptr) return Context::WrongType(*config, entry_what + ".path", "given");
    KD_ASSIGN_OR_RETURN(std::string module_path, Context::String(*path, entry_what + ".path"));
    module->mutable_input()->set_path(context.ModelPath(teacher, module_path));
    if (const YamlValue* io = keys.Take("io");
        io != nullptr && io->kind == Kind::kString && io->text == "input") {
      module->mutable_input()->set_io(IoRef::INPUT);
    }
    if (rule.module_kwargs_names.empty()) {  // the entry's own keys but path and io
      YamlValue rest = *config;
      rest.kind = Kind::kMap;
      rest.entries.clear();
      for (const auto& [kwarg, value] : config->entries) {
        if (kwarg == "path" || kwarg == "io") continue;
        keys.Take(kwarg);
        if (std::find(rule.module_flattened.begin(), rule.module_flattened.end(), kwarg) !=
                rule.module_flattened.end() &&
            value->kind == Kind::kMap) {
          rest.entries.insert(rest.entries.end(), value->entries.begin(), value->entries.end());
          continue;
        }
        bool switched = false;
        for (const auto& [dict, flag] : rule.module_switches) {
          if (dict != kwarg || value->kind == Kind::kNull) continue;
          Kwarg* on = module->add_kwargs();
          on->set_name(flag);
          on->set_boolean(true);
          switched = true;
        }
        if (!switched) rest.entries.emplace_back(kwarg, value);
      }
      KD_RETURN_IF_ERROR(context.Kwargs(&rest, "auxiliary_module", rule.module_key, entry_what,
                                        module->mutable_kwargs()));
    }
    for (const std::string& name : rule.module_kwargs_names) {
      if (const YamlValue* module_kwargs = keys.Take(name)) {
        KD_RETURN_IF_ERROR(context.Kwargs(module_kwargs, "auxiliary_module", rule.module_key,
                                          entry_what + "." + name, module->mutable_kwargs()));
        break;
      }
    }
    keys.Finish(context, "a module entry has path, io and its kwargs");
  }
  return absl::OkStatus();
}

// A chain of modules from a list kwarg (Student4KnowledgeReview's abfs), deepest first.
absl::Status ImportAuxChain(Context& context, const TorchdistillAuxRule& rule,
                            const YamlValue& kwargs, const std::string& what, bool teacher,
                            StageModelConfig* out) {
  const std::string at = absl::StrCat(what, ".kwargs.", rule.chain_kwarg);
  const YamlValue* list = kwargs.Find(rule.chain_kwarg);
  if (list == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(kwargs.Where(), ": ", what, ".kwargs needs ",
                                                   rule.chain_kwarg, " (torchdistill's too)"));
  }
  if (list->kind != Kind::kList || list->items.empty()) {
    return Context::WrongType(*list, at, "a list of {path, io, kwargs}");
  }
  std::vector<int64_t> sizes = rule.chain_default_sizes;
  for (const auto& [kwarg, value] : kwargs.entries) {
    if (kwarg == rule.chain_kwarg) continue;
    if (kwarg != rule.chain_sizes_kwarg) {
      context.Unsupported(*value, absl::StrCat(what, ".kwargs.", kwarg), kUnknownKey);
      continue;
    }
    if (value->kind == Kind::kNull) continue;
    if (value->kind != Kind::kList)
      return Context::WrongType(*value, what + ".kwargs." + kwarg, "a list of integers");
    sizes.clear();
    for (const auto& item : value->items) {
      KD_ASSIGN_OR_RETURN(int64_t size, Context::Int(*item, what + ".kwargs." + kwarg));
      sizes.push_back(size);
    }
  }
  const size_t n = list->items.size();
  // torchdistill runs the first module, then zips the rest with sizes[1:]: modules past the
  // sizes never run.
  if (sizes.size() < n) {
    context.Unsupported(*list, at,
                        absl::StrCat(n, " modules but ", sizes.size(),
                                     " sizes: torchdistill runs only as many as there are sizes "
                                     "(give a size per module)"));
    return absl::OkStatus();
  }
  for (size_t i = 0; i < n; ++i) {  // every name first: paths may name any of them
    context.wrapped(teacher).aux_names[absl::StrCat(rule.module_path_prefix, i)] =
        absl::StrCat(rule.chain_name, i);
  }
  for (size_t i = 0; i < n; ++i) {
    const YamlValue& entry = *list->items[n - 1 - i];
    const std::string entry_what = absl::StrCat(at, "[", n - 1 - i, "]");
    KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(&entry, entry_what));
    AuxiliaryModuleConfig* module = out->add_auxiliary_modules();
    module->set_name(absl::StrCat(rule.chain_name, i));
    module->set_key(rule.module_key);
    KD_RETURN_IF_ERROR(AuxInput(context, entry, entry_what, teacher, module));
    keys.Take("path");
    keys.Take("io");
    YamlValue renamed{.kind = Kind::kMap};
    if (const YamlValue* module_kwargs = keys.Take("kwargs")) {
      renamed = *module_kwargs;
      for (auto& [name, value] : renamed.entries) {
        for (const auto& [from, to] : rule.module_renamed) {
          if (name != from) continue;
          context.Note(*value, absl::StrCat(entry_what, ".kwargs.", name),
                       absl::StrCat("taken as ", to, ", the name torchdistill's ", rule.module_key,
                                    " takes"));
          name = to;
        }
      }
    }
    keys.Finish(context, "a chained module has path, io and kwargs");
    KD_RETURN_IF_ERROR(context.Kwargs(&renamed, "auxiliary_module", rule.module_key,
                                      entry_what + ".kwargs", module->mutable_kwargs()));
    if (i == 0) continue;  // the deepest: no residual, no attention
    Kwarg* attention = module->add_kwargs();
    attention->set_name(rule.chain_switch);
    attention->set_boolean(true);
    Kwarg* size = module->add_kwargs();
    size->set_name("size");
    size->set_integer(sizes[i]);
    IoRef* residual = module->add_extra_inputs();
    residual->set_path(absl::StrCat(rule.chain_name, i - 1));
    residual->set_element(1);
  }
  return absl::OkStatus();
}

}  // namespace

// A wrapper with a TorchdistillAuxRule as the libkd auxiliary module it adds; another reported.
absl::Status ImportAuxWrapper(Context& context, const YamlValue& wrapper, const std::string& what,
                              bool teacher, StageModelConfig* out) {
  KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(&wrapper, what));
  const YamlValue* key = keys.Take("key");
  const YamlValue* kwargs = keys.Take("kwargs");
  // torchdistill trims the model with the wrapper's `sequential` before wrapping it
  // (redesign_model(..., 'pre-auxiliary')): the stage's trimmed model.
  if (const YamlValue* sequential = keys.Take("sequential");
      sequential != nullptr && sequential->kind != Kind::kNull) {
    KD_ASSIGN_OR_RETURN(std::vector<std::string> paths,
                        Context::Strings(*sequential, what + ".sequential"));
    for (const std::string& path : paths) out->add_sequential(path);
  }
  keys.Finish(context, "a wrapper has key, kwargs and sequential");
  const std::string name = key != nullptr ? key->text : "";
  if (name == "EmptyModule") {  // torchdistill's identity in place of the model
    context.Note(wrapper, what + " EmptyModule",
                 "the model is not run in this stage (forward_proc identity: the samples stand "
                 "for its output, as torchdistill's EmptyModule returns its input)");
    out->mutable_forward_proc()->set_key(kIdentityProc);
    return absl::OkStatus();
  }
  absl::StatusOr<const TorchdistillAuxRule*> found = TorchdistillAuxRules().Get(name);
  if (!found.ok()) {
    context.UnsupportedPlugin(
        wrapper, absl::StrCat(what, " ", name), "auxiliary_module", name,
        absl::StrCat(
            "libkd has the auxiliary module \"", name,
            "\" (StageModelConfig.auxiliary_modules) but no torchdistill import rule "
            "for its wrapper (TorchdistillAuxRule, distill/boxes/torchdistill_aux_rule.h): "
            "add it by hand with its input path (distill/boxes/docs/runs.md)"),
        "libkd's auxiliary modules (StageModelConfig.auxiliary_modules) are the modules such "
        "wrappers add, wired by hand: ");
    return absl::OkStatus();
  }
  const TorchdistillAuxRule& rule = **found;
  Context::Wrapped& wrapped = context.wrapped(teacher);
  wrapped.on = true;
  wrapped.prefix = rule.model_prefix;
  if (!rule.left_out.empty()) {
    context.Note(wrapper, absl::StrCat(what, " ", name), "left out: " + rule.left_out);
    return absl::OkStatus();
  }
  if (kwargs == nullptr || kwargs->kind != Kind::kMap) {
    return Context::WrongType(wrapper, what + ".kwargs", "a mapping");
  }
  if (!rule.modules_kwarg.empty()) {
    return ImportAuxModules(context, rule, *kwargs, what, teacher, out);
  }
  if (!rule.chain_kwarg.empty()) return ImportAuxChain(context, rule, *kwargs, what, teacher, out);
  wrapped.aux_names[rule.name] = rule.name;
  wrapped.unneeded.insert(rule.unneeded.begin(), rule.unneeded.end());
  AuxiliaryModuleConfig* module = out->add_auxiliary_modules();
  module->set_name(rule.name);
  module->set_key(rule.single_module_key.empty() ? name : rule.single_module_key);
  // The value it runs on: {path, io} or a path (its output), in the wrapped model's names.
  const YamlValue* input = kwargs->Find(rule.input_kwarg);
  if (input == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(kwargs->Where(), ": ", what, ".kwargs needs ",
                                                   rule.input_kwarg, " (torchdistill's too)"));
  }
  KD_RETURN_IF_ERROR(AuxInput(context, *input, what + "." + rule.input_kwarg, teacher, module));
  // Its kwargs: dicts flattened, always-true switches left out.
  YamlValue rest = *kwargs;
  rest.entries.clear();
  for (const auto& [kwarg, value] : kwargs->entries) {
    if (kwarg == rule.input_kwarg) continue;
    if (!rule.minimal_kwarg.empty() && kwarg == rule.minimal_kwarg) {  // the stage's trimmed model
      if (value->kind == Kind::kNull) continue;
      KD_ASSIGN_OR_RETURN(Keys minimal, Keys::Of(value.get(), what + ".kwargs." + kwarg));
      if (const YamlValue* sequential = minimal.Take("sequential")) {
        KD_ASSIGN_OR_RETURN(
            std::vector<std::string> paths,
            Context::Strings(*sequential, what + ".kwargs." + kwarg + ".sequential"));
        for (const std::string& path : paths) out->add_sequential(path);
      }
      minimal.Finish(context, "a minimal model is its sequential list");
      continue;
    }
    const std::string& name_of = kwarg;  // (a structured binding, which lambdas cannot capture)
    if (auto dropped = std::find_if(rule.dropped.begin(), rule.dropped.end(),
                                    [&](const auto& d) { return d.first == name_of; });
        dropped != rule.dropped.end()) {
      context.Note(*value, absl::StrCat(what, ".kwargs.", kwarg), "left out: " + dropped->second);
      continue;
    }
    if (!rule.ckpt_kwarg.empty() && kwarg == rule.ckpt_kwarg) {
      if (value->kind == Kind::kNull) continue;
      KD_ASSIGN_OR_RETURN(std::string ckpt, Context::String(*value, what + ".kwargs." + kwarg));
      module->set_ckpt(ckpt);
      continue;
    }
    if (std::find(rule.flattened.begin(), rule.flattened.end(), kwarg) != rule.flattened.end() &&
        value->kind == Kind::kMap) {
      for (const auto& [inner, inner_value] : value->entries) {
        if (std::find(rule.true_by_default.begin(), rule.true_by_default.end(), inner) !=
            rule.true_by_default.end()) {
          if (inner_value->kind == Kind::kBool && inner_value->boolean) continue;
          context.Unsupported(*inner_value, absl::StrCat(what, ".kwargs.", kwarg, ".", inner),
                              absl::StrCat("libkd's \"", name, "\" always has it"));
          continue;
        }
        rest.entries.emplace_back(inner, inner_value);
      }
      continue;
    }
    rest.entries.emplace_back(kwarg, value);
  }
  return context.Kwargs(&rest, "auxiliary_module", module->key(), what + ".kwargs",
                        module->mutable_kwargs());
}

}  // namespace torchdistill
}  // namespace kd
