// torchdistill's train section (one stage, or each stageN) and its data loaders.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/registry.h"
#include "base/status_macros.h"
#include "distill/config/proc_fields.h"
#include "distill/torchdistill/import_context.h"

namespace kd {
namespace torchdistill {
namespace {

using Kind = YamlValue::Kind;

// A sampler's class: RandomSampler shuffles, SequentialSampler does not.
absl::Status ImportSampler(Context& context, const YamlValue& sampler, const std::string& what,
                           LoaderConfig* out) {
  KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(&sampler, what));
  const YamlValue* cls = keys.Take("class_or_func");
  const YamlValue* kwargs = keys.Take("kwargs");
  keys.Finish(context, kUnknownKey);
  if (cls == nullptr) return absl::OkStatus();
  const YamlValue* key = cls->kind == Kind::kCall ? cls->Find("key") : nullptr;
  const std::string name = key != nullptr ? key->text : cls->text;
  if (name == "torch.utils.data.RandomSampler" || name == "RandomSampler") {
    out->set_shuffle(true);
  } else if (name == "torch.utils.data.SequentialSampler" || name == "SequentialSampler") {
    out->set_shuffle(false);
  } else {
    // Another sampler by its class name, if libkd has it (LoaderConfig.sampler)
    const std::string short_name = name.substr(name.rfind('.') + 1);
    const RegistryBase* samplers = FindRegistry("sampler");
    if (samplers == nullptr || !samplers->Contains(short_name)) {
      context.Unsupported(
          *cls, absl::StrCat(what, ".class_or_func ", name),
          absl::StrCat("libkd's samplers: ", samplers != nullptr
                                                 ? samplers->CheckKey(short_name).message()
                                                 : "no sampler registry linked"));
      return absl::OkStatus();
    }
    out->mutable_sampler()->set_key(short_name);
    return context.Kwargs(kwargs, "sampler", short_name, what + ".kwargs",
                          out->mutable_sampler()->mutable_kwargs());
  }
  if (kwargs != nullptr && kwargs->kind == Kind::kMap && !kwargs->entries.empty()) {
    context.Unsupported(*kwargs, what + ".kwargs", "libkd's shuffling takes no sampler kwargs");
  }
  return absl::OkStatus();
}

// torchdistill wraps a loader's dataset; libkd wraps the dataset (DatasetConfig.wrapper), so
// every loader of it sees the wrapped one.
absl::Status ImportDatasetWrapper(Context& context, const YamlValue& wrapper,
                                  const std::string& what, const std::string& dataset_id) {
  KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(&wrapper, what));
  const YamlValue* key = keys.Take("key");
  const YamlValue* kwargs = keys.Take("kwargs");
  keys.Finish(context, "a dataset wrapper has key and kwargs");
  if (key == nullptr) return Context::WrongType(wrapper, what + ".key", "given");
  KD_ASSIGN_OR_RETURN(std::string name, Context::String(*key, what + ".key"));
  DatasetConfig* dataset = nullptr;
  for (DatasetConfig& d : *context.config().mutable_datasets()) {
    if (d.id() == dataset_id) dataset = &d;
  }
  if (dataset == nullptr || (dataset->has_wrapper() && dataset->wrapper().key() != name)) {
    context.Unsupported(wrapper, absl::StrCat(what, " ", name),
                        dataset == nullptr
                            ? "the loader names no dataset of the config"
                            : "libkd wraps a dataset once, for all its loaders, and dataset \"" +
                                  dataset_id + "\" is wrapped by " + dataset->wrapper().key());
    return absl::OkStatus();
  }
  PluginConfig* out = dataset->mutable_wrapper();
  out->set_key(name);
  out->clear_kwargs();
  KD_RETURN_IF_ERROR(
      context.Kwargs(kwargs, "dataset_wrapper", name, what + ".kwargs", out->mutable_kwargs()));
  context.Note(
      wrapper, what,
      "libkd wraps the dataset itself: every loader of \"" + dataset_id + "\" sees it wrapped");
  return absl::OkStatus();
}

// A plugin's key and kwargs (an optimizer's, a scheduler's); the key.
template <typename Config>
absl::StatusOr<std::string> KeyAndKwargs(Context& context, Keys& keys, const YamlValue& at,
                                         const std::string& kind, const std::string& what,
                                         Config* out) {
  const YamlValue* key = keys.Take("key");
  const char* kwargs_name = "kwargs";
  if (key == nullptr && (key = keys.Take("type")) != nullptr) {  // torchdistill 0.x
    context.Note(*key, what,
                 "torchdistill 0.x's form (type, params), taken as 1.x's (key, kwargs)");
    kwargs_name = "params";
  }
  if (key == nullptr) return Context::WrongType(at, what + ".key", "given");
  KD_ASSIGN_OR_RETURN(std::string name, Context::String(*key, what + ".key"));
  out->set_key(name);
  KD_RETURN_IF_ERROR(context.Kwargs(keys.Take(kwargs_name), kind, name,
                                    absl::StrCat(what, ".", kwargs_name), out->mutable_kwargs()));
  return name;
}

absl::Status ImportOptimizer(Context& context, const YamlValue& optimizer, const std::string& what,
                             OptimizerConfig* out) {
  KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(&optimizer, what));
  KD_ASSIGN_OR_RETURN(std::string name,
                      KeyAndKwargs(context, keys, optimizer, "optimizer", what, out));
  for (const char* field : {"module_wise_configs", "module_wise_kwargs"}) {
    const YamlValue* groups = keys.Take(field);
    if (groups == nullptr || groups->kind == Kind::kNull) continue;
    if (groups->kind != Kind::kList) {
      return Context::WrongType(*groups, absl::StrCat(what, ".", field), "a list");
    }
    for (const auto& group : groups->items) {
      const std::string group_what = absl::StrCat(what, ".", field, "[]");
      KD_ASSIGN_OR_RETURN(Keys group_keys, Keys::Of(group.get(), group_what));
      const YamlValue* module = group_keys.Take("module");
      if (module == nullptr) return Context::WrongType(*group, group_what + ".module", "given");
      KD_ASSIGN_OR_RETURN(std::string path, Context::String(*module, group_what + ".module"));
      ParamGroupConfig* param_group = out->add_param_groups();
      // torchdistill names a module from the box: student_model.layer1, teacher_model.fc
      if (absl::StartsWith(path, "teacher_model")) {
        param_group->set_model(ParamGroupConfig::TEACHER);
        path = path.substr(std::string("teacher_model").size());
      } else if (absl::StartsWith(path, "student_model")) {
        path = path.substr(std::string("student_model").size());
      } else {
        context.Unsupported(*module, absl::StrCat(group_what, ".module ", path),
                            "libkd's parameter groups name a module of the teacher_model or "
                            "the student_model");
      }
      if (absl::StartsWith(path, ".")) path = path.substr(1);
      param_group->set_module_path(path);
      KD_RETURN_IF_ERROR(context.Kwargs(group_keys.Take("kwargs"), "optimizer", name,
                                        group_what + ".kwargs", param_group->mutable_kwargs()));
      group_keys.Finish(context, "a parameter group has module and kwargs");
    }
  }
  if (const YamlValue* v = keys.Take("max_grad_norm"); v != nullptr && v->kind != Kind::kNull) {
    KD_ASSIGN_OR_RETURN(double norm, Context::Number(*v, what + ".max_grad_norm"));
    out->set_max_grad_norm(norm);
  }
  if (const YamlValue* v = keys.Take("grad_accum_step"); v != nullptr && v->kind != Kind::kNull) {
    KD_ASSIGN_OR_RETURN(int64_t step, Context::Int(*v, what + ".grad_accum_step"));
    if (step > 1) out->set_grad_accum_step(static_cast<int32_t>(step));
  }
  if (const YamlValue* v = keys.Take("filters_params"); v != nullptr) {
    if (v->kind == Kind::kBool && !v->boolean) {
      context.Unsupported(*v, what + ".filters_params false",
                          "libkd's optimizers take the parameters that train (filters_params: "
                          "true, torchdistill's default)");
    }
  }
  keys.Finish(context, kUnknownKey);
  return absl::OkStatus();
}

absl::Status ImportScheduler(Context& context, const YamlValue& scheduler, const std::string& what,
                             SchedulerConfig* out) {
  KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(&scheduler, what));
  KD_RETURN_IF_ERROR(KeyAndKwargs(context, keys, scheduler, "scheduler", what, out).status());
  if (const YamlValue* v = keys.Take("scheduling_step"); v != nullptr && v->kind != Kind::kNull) {
    KD_ASSIGN_OR_RETURN(int64_t step, Context::Int(*v, what + ".scheduling_step"));
    out->set_scheduling_step(static_cast<int32_t>(step));
  }
  keys.Finish(context, kUnknownKey);
  return absl::OkStatus();
}

}  // namespace

absl::Status ImportLoader(Context& context, const YamlValue& loader, const std::string& what,
                          LoaderConfig* out) {
  KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(&loader, what));
  if (const YamlValue* v = keys.Take("dataset_id")) {
    KD_ASSIGN_OR_RETURN(std::string id, Context::String(*v, what + ".dataset_id"));
    out->set_dataset_id(id);
  }
  if (const YamlValue* v = keys.Take("sampler"); v != nullptr && v->kind != Kind::kNull) {
    KD_RETURN_IF_ERROR(ImportSampler(context, *v, what + ".sampler", out));
  }
  if (const YamlValue* v = keys.Take("random_sample"); v != nullptr) {  // torchdistill 0.x
    KD_ASSIGN_OR_RETURN(bool shuffle, Context::Bool(*v, what + ".random_sample"));
    out->set_shuffle(shuffle);
  }
  // 1.x puts the DataLoader's kwargs under kwargs; 0.x beside dataset_id.
  const YamlValue* kwargs = keys.Take("kwargs");
  KD_ASSIGN_OR_RETURN(Keys loader_kwargs, Keys::Of(kwargs, what + ".kwargs"));
  for (Keys* source : {&loader_kwargs, &keys}) {
    const std::string at = source == &keys ? what : what + ".kwargs";
    if (const YamlValue* v = source->Take("batch_size"); v != nullptr) {
      KD_ASSIGN_OR_RETURN(int64_t size, Context::Int(*v, at + ".batch_size"));
      out->set_batch_size(static_cast<int32_t>(size));
    }
    if (const YamlValue* v = source->Take("num_workers"); v != nullptr) {
      KD_ASSIGN_OR_RETURN(int64_t workers, Context::Int(*v, at + ".num_workers"));
      out->set_num_workers(static_cast<int32_t>(workers));
    }
    if (const YamlValue* v = source->Take("drop_last"); v != nullptr) {
      KD_ASSIGN_OR_RETURN(bool drop, Context::Bool(*v, at + ".drop_last"));
      out->set_drop_last(drop);
    }
    if (const YamlValue* v = source->Take("shuffle"); v != nullptr) {
      KD_ASSIGN_OR_RETURN(bool shuffle, Context::Bool(*v, at + ".shuffle"));
      out->set_shuffle(shuffle);
    }
    if (const YamlValue* v = source->Take("pin_memory"); v != nullptr && v->boolean) {
      context.Note(*v, at + ".pin_memory", "left out: libkd's loaders move batches themselves");
    }
  }
  loader_kwargs.Finish(context, "libkd's loaders take batch_size, num_workers, drop_last");
  if (const YamlValue* v = keys.Take("cache_output"); v != nullptr && v->kind != Kind::kNull) {
    context.Note(*v, what + ".cache_output",
                 "left out: libkd's exact teacher cache (StageConfig.teacher_cache, AUTO) "
                 "caches the teacher's outputs where that is exact");
  }
  if (const YamlValue* v = keys.Take("dataset_wrapper"); v != nullptr && v->kind != Kind::kNull) {
    KD_RETURN_IF_ERROR(
        ImportDatasetWrapper(context, *v, what + ".dataset_wrapper", out->dataset_id()));
  }
  if (const YamlValue* v = keys.Take("requires_supp"); v != nullptr && v->boolean) {
    context.Note(*v, what + ".requires_supp", "left out: libkd's batches always carry supp");
  }
  keys.Finish(context, kUnknownKey);
  return absl::OkStatus();
}

absl::Status ImportStage(Context& context, const YamlValue& stage, const std::string& name,
                         const std::string& what, StageConfig* out) {
  KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(&stage, what));
  out->set_name(name);
  context.ResetWrapped();
  if (const YamlValue* v = keys.Take("num_epochs")) {
    KD_ASSIGN_OR_RETURN(int64_t epochs, Context::Int(*v, what + ".num_epochs"));
    out->set_num_epochs(static_cast<int32_t>(epochs));
  }
  if (const YamlValue* v = keys.Take("train_data_loader")) {
    KD_RETURN_IF_ERROR(
        ImportLoader(context, *v, what + ".train_data_loader", out->mutable_train_data_loader()));
  }
  if (const YamlValue* v = keys.Take("val_data_loader")) {
    KD_RETURN_IF_ERROR(
        ImportLoader(context, *v, what + ".val_data_loader", out->mutable_val_data_loader()));
  }
  for (const std::string role : {"teacher", "student", "model"}) {  // model: a TrainingBox's
    const bool teacher = role == "teacher";
    const YamlValue* v = keys.Take(role);
    if (v == nullptr) continue;
    StageModelConfig model;
    KD_RETURN_IF_ERROR(ImportStageModel(context, *v, what + "." + role, teacher, &model));
    if (model.ByteSizeLong() > 0) {  // else libkd's defaults: no section
      *(teacher ? out->mutable_teacher() : out->mutable_student()) = std::move(model);
    }
  }
  if (const YamlValue* v = keys.Take("optimizer")) {
    KD_RETURN_IF_ERROR(ImportOptimizer(context, *v, what + ".optimizer", out->mutable_optimizer()));
  }
  if (const YamlValue* v = keys.Take("scheduler"); v != nullptr && v->kind != Kind::kNull) {
    KD_RETURN_IF_ERROR(ImportScheduler(context, *v, what + ".scheduler", out->mutable_scheduler()));
  }
  if (const YamlValue* v = keys.Take("criterion")) {
    KD_RETURN_IF_ERROR(ImportCriterion(context, *v, what + ".criterion", out->mutable_criterion()));
  }
  // The stage's process functions, each a registry key (torchdistill's get_*_proc_func): the
  // libkd function of the same key, where libkd has one.
  struct Proc {
    const char* yaml;
    absl::string_view kind;
    PluginConfig* (StageConfig::*field)();
  };
  for (const Proc& proc :
       {Proc{"pre_epoch_process", kPreEpochProcKind, &StageConfig::mutable_pre_epoch_proc},
        Proc{"pre_forward_process", kPreForwardProcKind, &StageConfig::mutable_pre_forward_proc},
        Proc{"post_forward_process", kPostForwardProcKind, &StageConfig::mutable_post_forward_proc},
        Proc{"post_epoch_process", kPostEpochProcKind, &StageConfig::mutable_post_epoch_proc}}) {
    const YamlValue* v = keys.Take(proc.yaml);
    if (v == nullptr || v->kind == Kind::kNull) continue;
    const std::string at = absl::StrCat(what, ".", proc.yaml);
    KD_ASSIGN_OR_RETURN(std::string key, Context::String(*v, at));
    const RegistryBase* registry = FindRegistry(std::string(proc.kind));
    if (registry != nullptr && registry->Contains(key)) {
      (out->*proc.field)()->set_key(key);
    } else {
      context.UnsupportedPlugin(*v, absl::StrCat(at, " ", key), std::string(proc.kind), key, "",
                                "libkd has no process function of that key: register one in C++ "
                                "(KD_REGISTER_PROC_FUNC, distill/procs/proc_func.h); ");
    }
  }
  keys.Finish(context, kUnknownKey);
  return absl::OkStatus();
}

}  // namespace torchdistill
}  // namespace kd
