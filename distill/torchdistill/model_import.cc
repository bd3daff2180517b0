// torchdistill's teacher and student sections of a stage (and a TrainingBox's model section):
// hooks, trimming and adaptations, freezing, wrappers, checkpoints (auxiliary model wrappers:
// aux_wrapper_import.cc).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/registry.h"
#include "base/status_macros.h"
#include "distill/torchdistill/import_context.h"

namespace kd {
namespace torchdistill {
namespace {

using Kind = YamlValue::Kind;

// The model's hook on `path` (one per path), added if missing.
ForwardHookConfig* HookOn(const std::string& path, StageModelConfig* out) {
  for (ForwardHookConfig& h : *out->mutable_forward_hooks()) {
    if (h.module_path() == path) return &h;
  }
  ForwardHookConfig* hook = out->add_forward_hooks();
  hook->set_module_path(path);
  return hook;
}

// torchdistill's `sequential`: the model's module paths in order, and its adaptations, "+name"
// entries built from `adaptations` (FitNet's ConvReg regressor). libkd's trimmed model runs the
// model's own modules; adaptations after the last of them become auxiliary modules, each on the
// previous entry's output (the same values: torchdistill feeds each entry the previous one's
// output), named as in torchdistill without the "+" (hooks and criteria on "+name" read them).
// One between two of the model's modules has no libkd form and is reported.
// Adaptations torchdistill's HND/GHND samples put between a model's modules which the model now
// has as children of the same name and computation at that place: torchvision's inception_v3
// gained maxpool1 and maxpool2 (MaxPool2d(3, stride=2), before functional pooling) after the
// samples were written. Such an entry is the model's own child.
bool IsOwnChild(const std::string& model_key, const std::string& name, const YamlValue* entry) {
  if (model_key != "inception_v3" || (name != "maxpool1" && name != "maxpool2") ||
      entry == nullptr) {
    return false;
  }
  const YamlValue* key = entry->Find("key");
  const YamlValue* kwargs = entry->Find("kwargs");
  if (key == nullptr || key->kind != Kind::kString || key->text != "MaxPool2d" ||
      kwargs == nullptr || kwargs->kind != Kind::kMap || kwargs->entries.size() != 2) {
    return false;
  }
  const YamlValue* kernel = kwargs->Find("kernel_size");
  const YamlValue* stride = kwargs->Find("stride");
  return kernel != nullptr && kernel->kind == Kind::kInt && kernel->integer == 3 &&
         stride != nullptr && stride->kind == Kind::kInt && stride->integer == 2;
}

absl::Status ImportSequential(Context& context, const YamlValue& list, const YamlValue* adaptations,
                              const std::string& what, bool teacher, StageModelConfig* out) {
  KD_ASSIGN_OR_RETURN(std::vector<std::string> paths, Context::Strings(list, what + ".sequential"));
  if (!paths.empty() && out->sequential_size() > 0) {
    context.Unsupported(list, what + ".sequential",
                        "the auxiliary model wrapper's sequential trims the model already; libkd "
                        "has one trimmed model per stage");
    return absl::OkStatus();
  }
  const ModelConfig& model = teacher ? context.config().teacher() : context.config().student();
  for (std::string& p : paths) {
    if (!p.starts_with("+")) continue;
    const std::string name = p.substr(1);
    if (!IsOwnChild(model.native().key(), name,
                    adaptations != nullptr && adaptations->kind == Kind::kMap
                        ? adaptations->Find(name)
                        : nullptr)) {
      continue;
    }
    context.wrapped(teacher).own_children[p] = name;
    context.Note(list, absl::StrCat(what, ".sequential \"", p, "\""),
                 absl::StrCat("inception_v3's own ", name,
                              " (torchvision's MaxPool2d(3, stride=2) at that place), which the "
                              "adaptation stood in for when torchvision's forward pooled "
                              "functionally"));
    p = name;
  }
  const auto last_module = std::find_if(paths.rbegin(), paths.rend(),
                                        [](const std::string& p) { return !p.starts_with("+"); });
  for (auto it = paths.begin(); last_module != paths.rend() && it != last_module.base() - 1; ++it) {
    if (!it->starts_with("+")) continue;
    context.Unsupported(
        list, absl::StrCat(what, ".sequential \"", *it, "\" before \"", *last_module, "\""),
        "libkd's trimmed model runs the model's own modules in order and auxiliary modules "
        "after them on recorded values, so an adaptation between two of the model's modules "
        "has no place (only adaptations after the last module translate)");
    return absl::OkStatus();
  }
  std::string previous;  // libkd's name of the previous entry (a module path or an aux module)
  bool previous_is_model = false;
  std::vector<std::string> placed;
  for (const std::string& p : paths) {
    if (!p.starts_with("+")) {
      previous = context.ModelPath(teacher, p);
      previous_is_model = true;
      out->add_sequential(previous);
      continue;
    }
    const std::string name = p.substr(1);
    const std::string entry_what = absl::StrCat(what, ".adaptations.", name);
    const YamlValue* entry = adaptations != nullptr && adaptations->kind == Kind::kMap
                                 ? adaptations->Find(name)
                                 : nullptr;
    if (entry == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(list.Where(), ": ", what, ".sequential \"", p,
                                                     "\" needs ", entry_what,
                                                     " (torchdistill's too)"));
    }
    if (previous.empty()) {
      context.Unsupported(list, absl::StrCat(what, ".sequential \"", p, "\""),
                          "an adaptation first in the sequential runs on the model's input, "
                          "which libkd's auxiliary modules do not read");
      return absl::OkStatus();
    }
    KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(entry, entry_what));
    const YamlValue* key = keys.Take("key");
    const YamlValue* kwargs = keys.Take("kwargs");
    keys.Finish(context, "an adaptation has key and kwargs");
    if (key == nullptr) return Context::WrongType(*entry, entry_what + ".key", "given");
    KD_ASSIGN_OR_RETURN(std::string module_key, Context::String(*key, entry_what + ".key"));
    if (const RegistryBase* registry = FindRegistry("auxiliary_module");
        registry == nullptr || !registry->Contains(module_key)) {
      context.UnsupportedPlugin(*key, absl::StrCat(entry_what, " ", module_key), "auxiliary_module",
                                module_key, "", "libkd builds adaptations as auxiliary modules: ");
      return absl::OkStatus();
    }
    AuxiliaryModuleConfig* module = out->add_auxiliary_modules();
    module->set_name(name);
    module->set_key(module_key);
    KD_RETURN_IF_ERROR(context.Kwargs(kwargs, "auxiliary_module", module_key, entry_what,
                                      module->mutable_kwargs()));
    module->mutable_input()->set_path(previous);
    if (previous_is_model) HookOn(previous, out)->set_requires_output(true);
    context.wrapped(teacher).aux_names[p] = name;
    previous = name;
    previous_is_model = false;
    placed.push_back(p);
  }
  if (!placed.empty()) {
    context.Note(list, what + ".sequential",
                 absl::StrCat("the adaptations (", absl::StrJoin(placed, ", "),
                              ") are auxiliary modules on the last module's output; the trimmed "
                              "model's own output is that module's, not the last adaptation's"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ImportStageModel(Context& context, const YamlValue& model, const std::string& what,
                              bool teacher, StageModelConfig* out) {
  KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(&model, what));
  if (const YamlValue* v = keys.Take("auxiliary_model_wrapper");
      v != nullptr && v->kind != Kind::kNull) {
    KD_RETURN_IF_ERROR(
        ImportAuxWrapper(context, *v, what + ".auxiliary_model_wrapper", teacher, out));
  }
  bool frozen_whole_model = false;
  const YamlValue* adaptations = keys.Take("adaptations");
  if (const YamlValue* v = keys.Take("sequential")) {
    KD_RETURN_IF_ERROR(ImportSequential(context, *v, adaptations, what, teacher, out));
  } else if (adaptations != nullptr && adaptations->kind == Kind::kMap &&
             !adaptations->entries.empty()) {
    context.Note(*adaptations, what + ".adaptations",
                 "left out: no sequential places them (torchdistill builds them only there)");
  }
  if (const YamlValue* v = keys.Take("frozen_modules")) {
    KD_ASSIGN_OR_RETURN(std::vector<std::string> paths,
                        Context::Strings(*v, what + ".frozen_modules"));
    for (const std::string& p : paths) {
      if (context.wrapped(teacher).on && p + "." == context.wrapped(teacher).prefix) {
        // the whole wrapped model frozen, its wrapper's modules training: libkd's model
        // without requires_grad beside its auxiliary modules (which train by default)
        context.Note(*v, absl::StrCat(what, ".frozen_modules ", p),
                     "the wrapped model frozen: requires_grad false for it, its auxiliary "
                     "modules train");
        frozen_whole_model = true;
        continue;
      }
      out->add_frozen_modules(context.ModelPath(teacher, p));
    }
  }
  // torchdistill's requires_grad defaults to True for the teacher as for the student
  // (teacher_config.get('requires_grad', True)): a teacher section without it trains, its
  // parameters in the optimizer beside the student's, its forward with gradients.
  bool grad = true;
  const YamlValue* grad_value = keys.Take("requires_grad");
  const bool given = grad_value != nullptr && grad_value->kind != Kind::kNull;
  if (given) {
    KD_ASSIGN_OR_RETURN(grad, Context::Bool(*grad_value, what + ".requires_grad"));
    // torchdistill's requires_grad is the wrapper's: false freezes its modules too (factor
    // transfer's paraphraser, SSKD's teacher module in their second stages), where libkd's
    // auxiliary modules train unless told not to
    if (!grad) {
      for (AuxiliaryModuleConfig& module : *out->mutable_auxiliary_modules()) {
        module.set_requires_grad(false);
      }
    }
  }
  // with the wrapped model frozen, only its modules train
  if (frozen_whole_model) grad = false;
  if (grad == teacher) {  // else libkd's default already
    out->set_requires_grad(grad);
    if (teacher && !given) {
      context.Note(model, what + ".requires_grad",
                   "not given: torchdistill trains the teacher then (its default is True), so "
                   "libkd does too (requires_grad: true, its parameters in the optimizer); add "
                   "requires_grad: False to the YAML to distil from a frozen teacher");
    }
  }
  if (const YamlValue* v = keys.Take("wrapper"); v != nullptr && v->kind != Kind::kNull) {
    // A key, or {key, kwargs} (torchdistill 1.x's wrap_model takes both).
    const YamlValue* key_value = v;
    if (v->kind == Kind::kMap) {
      KD_ASSIGN_OR_RETURN(Keys wrapper_keys, Keys::Of(v, what + ".wrapper"));
      key_value = wrapper_keys.Take("key");
      if (key_value == nullptr) return Context::WrongType(*v, what + ".wrapper.key", "a string");
      if (const YamlValue* kwargs = wrapper_keys.Take("kwargs");
          kwargs != nullptr && kwargs->kind != Kind::kNull) {
        KD_ASSIGN_OR_RETURN(Keys kwarg_keys, Keys::Of(kwargs, what + ".wrapper.kwargs"));
        if (kwarg_keys.Take("device_ids") != nullptr) {
          context.Note(*kwargs, what + ".wrapper.kwargs.device_ids",
                       "left out: torchdistill sets them from the process's device, as libkd does");
        }
        kwarg_keys.Finish(context, "libkd's DistributedDataParallel (c10d's Reducer) takes no "
                                   "wrapper kwargs");
      }
      wrapper_keys.Finish(context, "a wrapper is {key, kwargs}");
    }
    KD_ASSIGN_OR_RETURN(std::string wrapper, Context::String(*key_value, what + ".wrapper"));
    if (wrapper == "DistributedDataParallel") {
      out->set_wrapper(StageModelConfig::DISTRIBUTED_DATA_PARALLEL);
    } else if (wrapper == "DataParallel") {
      context.Note(*v, what + ".wrapper DataParallel",
                   "left out: libkd runs one device per process (several devices: one process "
                   "each, DISTRIBUTED_DATA_PARALLEL)");
    } else {
      context.Unsupported(*v, absl::StrCat(what, ".wrapper ", wrapper),
                          "libkd wraps in DistributedDataParallel only");
    }
  }
  if (const YamlValue* v = keys.Take("forward_hook"); v != nullptr && v->kind != Kind::kNull) {
    KD_ASSIGN_OR_RETURN(Keys hook_keys, Keys::Of(v, what + ".forward_hook"));
    for (const char* io : {"input", "output"}) {
      const YamlValue* paths_value = hook_keys.Take(io);
      if (paths_value == nullptr) continue;
      KD_ASSIGN_OR_RETURN(std::vector<std::string> paths,
                          Context::Strings(*paths_value, absl::StrCat(what, ".forward_hook.", io)));
      for (const std::string& given : paths) {
        if (out->forward_proc().key() == kIdentityProc) {
          context.Unsupported(
              *paths_value, absl::StrCat(what, ".forward_hook.", io, " ", given),
              "the model is not run in this stage (EmptyModule), and torchdistill's "
              "EmptyModule has no modules to hook either");
          continue;
        }
        const std::string path = context.ModelPath(teacher, given);
        if (context.wrapped(teacher).unneeded.contains(path)) {
          context.Note(*paths_value, absl::StrCat(what, ".forward_hook.", io, " ", given),
                       "left out: a submodule of torchdistill's wrapper that libkd has no need "
                       "of");
          continue;
        }
        if (context.IsAuxModule(teacher, path)) {
          context.Note(*paths_value, absl::StrCat(what, ".forward_hook.", io, " ", given),
                       "left out: libkd records an auxiliary module's output under its name");
          continue;
        }
        ForwardHookConfig* hook = HookOn(path, out);
        (std::string(io) == "input" ? hook->set_requires_input(true)
                                    : hook->set_requires_output(true));
      }
    }
    hook_keys.Finish(context, "a forward_hook has input and output lists");
  }
  for (const char* ckpt : {"src_ckpt", "dst_ckpt"}) {
    const YamlValue* v = keys.Take(ckpt);
    if (v == nullptr || v->kind == Kind::kNull) continue;
    KD_ASSIGN_OR_RETURN(std::string path, Context::String(*v, absl::StrCat(what, ".", ckpt)));
    (std::string(ckpt) == "src_ckpt" ? out->set_src_ckpt(path) : out->set_dst_ckpt(path));
  }
  if (const YamlValue* v = keys.Take("forward_proc"); v != nullptr && v->kind != Kind::kNull) {
    KD_ASSIGN_OR_RETURN(std::string key, Context::String(*v, what + ".forward_proc"));
    if (out->forward_proc().key() == kIdentityProc) {
      context.Note(*v, absl::StrCat(what, ".forward_proc ", key),
                   "left out: the model is not run (EmptyModule)");
    } else if (key == "forward_batch_supp_dict" && context.wrapped(teacher).on) {
      // torchdistill hands the supplementary dict to its wrapper (Linear4CRD reads the
      // batch's indices there), which libkd's auxiliary modules replace: they read it from the
      // loader, and the model takes the samples alone.
      context.Note(*v, absl::StrCat(what, ".forward_proc ", key),
                   "left out: the wrapper it fed is libkd's auxiliary module, which reads the "
                   "supplementary values from the loader; the model runs on the samples");
    } else {
      out->mutable_forward_proc()->set_key(key);
    }
  }
  keys.Finish(context, kUnknownKey);
  return absl::OkStatus();
}

}  // namespace torchdistill
}  // namespace kd
