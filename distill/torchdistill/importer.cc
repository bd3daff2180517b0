#include "distill/torchdistill/importer.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/registry.h"
#include "base/status_macros.h"
#include "distill/models/torchdistill_model_rule.h"
#include "distill/torchdistill/import_context.h"
#include "distill/torchdistill/yaml_value.h"

namespace kd {
namespace torchdistill {
namespace {

using Kind = YamlValue::Kind;

absl::Status ImportModel(Context& context, const YamlValue& model, const std::string& what,
                         bool teacher, ModelConfig* out) {
  KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(&model, what));
  const YamlValue* key = keys.Take("key");
  if (key == nullptr && (key = keys.Take("name")) != nullptr) {  // torchdistill 0.x
    context.Note(*key, what + ".name", "torchdistill 0.x's model key, taken as 1.x's key");
  }
  if (const YamlValue* ckpt = keys.Take("ckpt"); ckpt != nullptr && ckpt->kind != Kind::kNull) {
    // torchdistill 0.x: the teacher's checkpoint to load, the student's to write
    KD_ASSIGN_OR_RETURN(std::string path, Context::String(*ckpt, what + ".ckpt"));
    context.Note(*ckpt, what + ".ckpt",
                 absl::StrCat("torchdistill 0.x's checkpoint, taken as 1.x's ",
                              teacher ? "src_ckpt" : "dst_ckpt"));
    (teacher ? out->set_src_ckpt(path) : out->set_dst_ckpt(path));
  }
  if (const YamlValue* experiment = keys.Take("experiment")) {  // torchdistill 0.x
    context.Note(*experiment, what + ".experiment",
                 "left out: it names torchdistill's output files; libkd's go to the run's folder "
                 "(run.name)");
  }
  if (key == nullptr) return Context::WrongType(model, what + ".key", "given");
  KD_ASSIGN_OR_RETURN(std::string name, Context::String(*key, what + ".key"));
  PluginConfig* native = out->mutable_native();
  native->set_key(name);
  // torchdistill's name of a libkd model (wide_resnet40_4: wrn of depth 40, widen factor 4)
  const TorchdistillModelRule* rule = nullptr;
  if (absl::StatusOr<const TorchdistillModelRule*> found = TorchdistillModelRules().Get(name);
      found.ok()) {
    rule = *found;
    native->set_key(rule->libkd_key);
    std::vector<std::string> fixed;
    for (const auto& [kwarg, value] : rule->fixed) {
      Kwarg* k = native->add_kwargs();
      k->set_name(kwarg);
      k->set_integer(value);
      fixed.push_back(absl::StrCat(kwarg, " ", value));
    }
    context.Note(
        *key, absl::StrCat(what, " ", name),
        absl::StrCat("libkd's \"", rule->libkd_key, "\" with ", absl::StrJoin(fixed, ", ")));
  }
  // HND/GHND's newer samples build their students from sc2-benchmark by torch.hub: libkd's
  // custom_* models take that naming (bottleneck_layer, inception_modules).
  bool sc2bench = false;
  if (const YamlValue* repo = keys.Take("repo_or_dir");
      repo != nullptr && repo->kind != Kind::kNull) {
    KD_ASSIGN_OR_RETURN(std::string where, Context::String(*repo, what + ".repo_or_dir"));
    sc2bench = where == "yoshitomo-matsubara/sc2-benchmark" && absl::StartsWith(name, "custom_");
    if (sc2bench) {
      context.Note(*repo, what + ".repo_or_dir",
                   absl::StrCat("sc2-benchmark's ", name, " by torch.hub: libkd's ", name,
                                " with naming \"sc2bench\" (the same layers, sc2-benchmark's "
                                "module names)"));
    } else {
      context.Unsupported(*repo, what + ".repo_or_dir",
                          absl::StrCat("a torch.hub repository (", where,
                                       "): libkd builds models from its own registry; register a "
                                       "native model under \"", name,
                                       "\" or export the model from Python"));
    }
  }
  const RegistryBase* models = FindRegistry("model");
  if (models != nullptr && !models->Contains(native->key())) {
    context.Unsupported(
        *key, absl::StrCat(what, " ", name),
        teacher ? absl::StrCat("not a libkd model: export the Python teacher as an AOTInductor "
                               "package (python tools/export_teacher.py --model=torchvision:",
                               name,
                               " --state=TEACHER_STATE.pt --input_shape=N,C,H,W "
                               "--hooks=PATH:IO,... --out=teacher.pt2) and set teacher { "
                               "aoti_package: \"teacher.pt2\" }, or register a native model "
                               "under this key (distill/models/model_registry.h)")
                : "not a libkd model: register a native model under this key "
                  "(distill/models/model_registry.h); a student trains, so it cannot be an "
                  "exported package");
  }
  const YamlValue* kwargs = keys.Take("kwargs");
  if (kwargs == nullptr && (kwargs = keys.Take("params")) != nullptr) {  // torchdistill 0.x
    context.Note(*kwargs, what + ".params", "torchdistill 0.x's model kwargs, taken as 1.x's");
  }
  if (kwargs != nullptr && kwargs->kind == Kind::kMap) {
    // torchvision's and torchdistill's download switches: libkd builds models without weights
    YamlValue rest = *kwargs;
    rest.entries.clear();
    for (const auto& [kwarg, value] : kwargs->entries) {
      if (kwarg == "progress") continue;  // a download's progress bar
      if (kwarg == "pretrained" || kwarg == "weights") {
        if (value->kind == Kind::kNull || (value->kind == Kind::kBool && !value->boolean)) continue;
        const YamlValue* classes = kwargs->Find("num_classes");
        const std::string origin = WeightsOrigin(name);  // whose weight file
        std::string why;
        if (std::optional<PretrainedFile> file = FindPretrainedFile(
                origin, *value,
                classes != nullptr && classes->kind == Kind::kInt ? classes->integer : -1, &why)) {
          // Where torch.hub keeps the download; an explicit src_ckpt below replaces it.
          out->set_src_ckpt(ExpandUser("~/.cache/torch/hub/checkpoints/" + file->file));
          if (origin != name) {
            // torchdistill builds the original with its weights and keeps some children.
            out->set_ignore_mismatched_sizes(true);
            context.Note(*value, absl::StrCat(what, ".kwargs.", kwarg),
                         absl::StrCat("ignore_mismatched_sizes: ", name, " keeps only some of ",
                                      origin, "'s modules: their weights load from ", origin,
                                      "'s file, the rest of the file is left out and the "
                                      "bottleneck starts at random, as in torchdistill"));
          } else if (name == "inception_v3") {
            // torchvision's inception_v3(weights=...): transform_input on unless given; the file
            // holds AuxLogits, which aux_logits=False drops after loading.
            if (kwargs->Find("transform_input") == nullptr) {
              auto on = std::make_shared<YamlValue>(*value);
              on->kind = Kind::kBool;
              on->boolean = true;
              on->tag.clear();
              on->items.clear();
              rest.entries.emplace_back("transform_input", on);
              context.Note(*value, absl::StrCat(what, ".kwargs.", kwarg),
                           "transform_input: true, as torchvision's inception_v3 sets it with "
                           "weights");
            }
            if (const YamlValue* aux = kwargs->Find("aux_logits");
                aux != nullptr && aux->kind == Kind::kBool && !aux->boolean) {
              out->set_ignore_mismatched_sizes(true);
              context.Note(*aux, what + ".kwargs.aux_logits",
                           "ignore_mismatched_sizes: the weight file's AuxLogits is left out, "
                           "as torchvision drops it after loading");
            }
          }
          context.Note(*value, absl::StrCat(what, ".kwargs.", kwarg),
                       absl::StrCat("src_ckpt: ", file->what, ", ~/.cache/torch/hub/checkpoints/",
                                    file->file,
                                    " (where torch.hub keeps it; on a machine with "
                                    "network, the pinned venv makes it: ",
                                    file->make, ")"));
          continue;
        }
        context.Unsupported(*value, absl::StrCat(what, ".kwargs.", kwarg),
                            absl::StrCat(why,
                                         "; give the checkpoint as src_ckpt (a teacher "
                                         "exported from Python carries its weights)"));
        continue;
      }
      std::string libkd_name = kwarg;
      if (rule != nullptr) {
        for (const auto& [from, to] : rule->renamed) {
          if (from == kwarg) libkd_name = to;
        }
      }
      rest.entries.emplace_back(libkd_name, value);
    }
    KD_RETURN_IF_ERROR(
        context.Kwargs(&rest, "model", native->key(), what + ".kwargs", native->mutable_kwargs()));
    if (sc2bench) {
      Kwarg* naming = native->add_kwargs();
      naming->set_name("naming");
      naming->set_str("sc2bench");
    }
  } else {
    KD_RETURN_IF_ERROR(
        context.Kwargs(kwargs, "model", native->key(), what + ".kwargs", native->mutable_kwargs()));
  }
  for (const char* ckpt : {"src_ckpt", "dst_ckpt"}) {
    const YamlValue* v = keys.Take(ckpt);
    if (v == nullptr || v->kind == Kind::kNull) continue;
    KD_ASSIGN_OR_RETURN(std::string path, Context::String(*v, absl::StrCat(what, ".", ckpt)));
    (std::string(ckpt) == "src_ckpt" ? out->set_src_ckpt(path) : out->set_dst_ckpt(path));
  }
  keys.Finish(context, "libkd's models take key, kwargs, src_ckpt, dst_ckpt and repo_or_dir");
  return absl::OkStatus();
}

absl::Status ImportTrain(Context& context, const YamlValue& train, DistillConfig* config) {
  KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(&train, "train"));
  if (const YamlValue* v = keys.Take("log_freq"); v != nullptr && v->kind != Kind::kNull) {
    KD_ASSIGN_OR_RETURN(int64_t every, Context::Int(*v, "train.log_freq"));
    config->mutable_run()->set_log_every_n_steps(static_cast<int32_t>(every));
  }
  // torchdistill's multi-stage form: stage1, stage2, ... (in number order)
  std::vector<std::pair<int, std::string>> stages;
  static const std::regex kStage("stage([0-9]+)");
  for (const auto& [name, _] : train.entries) {
    std::smatch match;
    if (std::regex_match(name, match, kStage)) stages.emplace_back(std::stoi(match[1]), name);
  }
  std::sort(stages.begin(), stages.end());
  if (stages.empty()) {
    YamlValue rest = train;  // the stage's keys: all but log_freq
    rest.entries.erase(std::remove_if(rest.entries.begin(), rest.entries.end(),
                                      [](const auto& e) { return e.first == "log_freq"; }),
                       rest.entries.end());
    for (const auto& [name, _] : rest.entries) keys.Take(name);
    KD_RETURN_IF_ERROR(ImportStage(context, rest, "train", "train", config->mutable_train()));
  }
  for (const auto& [number, name] : stages) {
    KD_RETURN_IF_ERROR(
        ImportStage(context, *keys.Take(name), name, "train." + name, config->add_stages()));
  }
  keys.Finish(context, "a multi-stage train section holds stage1, stage2, ... and log_freq");
  return absl::OkStatus();
}

absl::Status ImportRoot(Context& context, const YamlValue& root, const ImportOptions& options,
                        const std::string& file) {
  DistillConfig& config = context.config();
  config.mutable_run()->set_name(
      options.run_name.empty() ? std::filesystem::path(file).stem().string() : options.run_name);
  if (options.seed != 0) config.mutable_run()->set_seed(options.seed);
  KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(&root, "the config"));
  if (const YamlValue* datasets = keys.Take("datasets")) {
    if (datasets->kind != Kind::kMap) return Context::WrongType(*datasets, "datasets", "a mapping");
    for (const auto& [id, dataset] : datasets->entries) {
      if (id.starts_with("_")) continue;
      if (const YamlValue* key = dataset->Find("key");
          dataset->kind == Kind::kCall && dataset->tag == "!import_call" && key != nullptr &&
          (key->text == "torchdistill.datasets.util.split_dataset" ||
           key->text == "torchdistill.datasets.split_dataset")) {
        // The split list itself (torchdistill's 1.x CIFAR hyperparameter-tuning samples): the
        // datasets are the entries that pick its parts (!access_by_index_or_key).
        context.Note(*dataset, "datasets." + id,
                     "the list of split_dataset's parts, imported where each part is picked "
                     "(!access_by_index_or_key); no dataset of its own");
        continue;
      }
      if (dataset->kind == Kind::kMap && dataset->Find("splits") != nullptr) {
        KD_RETURN_IF_ERROR(ImportSplitDatasets(context, *dataset, "datasets." + id, &config));
        continue;
      }
      DatasetConfig* out = config.add_datasets();
      out->set_id(id);
      KD_RETURN_IF_ERROR(ImportDataset(context, *dataset, "datasets." + id, out));
    }
  }
  if (const YamlValue* models = keys.Take("models")) {
    KD_ASSIGN_OR_RETURN(Keys model_keys, Keys::Of(models, "models"));
    if (const YamlValue* teacher = model_keys.Take("teacher_model")) {
      KD_RETURN_IF_ERROR(ImportModel(context, *teacher, "models.teacher_model", /*teacher=*/true,
                                     config.mutable_teacher()));
      if (options.module_paths)
        context.SetModulePaths(true, options.module_paths(config.teacher()));
    }
    for (const char* student : {"student_model", "model"}) {
      if (const YamlValue* v = model_keys.Take(student)) {
        KD_RETURN_IF_ERROR(ImportModel(context, *v, absl::StrCat("models.", student),
                                       /*teacher=*/false, config.mutable_student()));
        if (options.module_paths) {
          context.SetModulePaths(false, options.module_paths(config.student()));
        }
      }
    }
    model_keys.Finish(context, "torchdistill's models are teacher_model and student_model");
  }
  if (const YamlValue* train = keys.Take("train")) {
    KD_RETURN_IF_ERROR(ImportTrain(context, *train, &config));
    // torchdistill's boxes never set the teacher's mode (its pre-epoch process sets the
    // student's only): the teacher runs as it was handed in.
    if (config.has_teacher() && options.teacher_mode == StageConfig::TEACHER_AS_IS) {
      if (config.has_train()) config.mutable_train()->set_teacher_mode(StageConfig::TEACHER_AS_IS);
      for (StageConfig& stage : *config.mutable_stages()) {
        stage.set_teacher_mode(StageConfig::TEACHER_AS_IS);
      }
      context.Note(*train, "train",
                   "teacher_mode: TEACHER_AS_IS, as torchdistill's boxes never set the teacher's "
                   "mode (a teacher not evaluated first distils in train mode); libkd's default, "
                   "TEACHER_EVAL, puts it in eval mode each epoch (--teacher_mode=eval)");
    }
  }
  if (const YamlValue* test = keys.Take("test")) {
    KD_ASSIGN_OR_RETURN(Keys test_keys, Keys::Of(test, "test"));
    if (const YamlValue* loader = test_keys.Take("test_data_loader")) {
      KD_RETURN_IF_ERROR(ImportLoader(context, *loader, "test.test_data_loader",
                                      config.mutable_test_data_loader()));
    }
    test_keys.Finish(context, "libkd's test section is its test_data_loader");
  }
  keys.Finish(context, "a torchdistill config has datasets, models, train and test");
  // What torchdistill's image-classification script evaluates: top-1 and top-5 accuracy.
  MetricConfig* top1 = config.mutable_evaluation()->add_metrics();
  top1->set_key("accuracy");
  MetricConfig* top5 = config.mutable_evaluation()->add_metrics();
  top5->set_name("top5");
  top5->set_key("accuracy");
  Kwarg* k = top5->add_kwargs();
  k->set_name("top_k");
  k->set_integer(5);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Import> ImportText(const std::string& text, const std::string& file,
                                  const ImportOptions& options) {
  KD_ASSIGN_OR_RETURN(std::shared_ptr<const YamlValue> root, ParseTorchdistillYaml(text, file));
  Import out;
  Context context(out);
  KD_RETURN_IF_ERROR(ImportRoot(context, *root, options, file));
  return out;
}

absl::StatusOr<Import> ImportFile(const std::string& path, const ImportOptions& options) {
  KD_ASSIGN_OR_RETURN(std::shared_ptr<const YamlValue> root, ReadTorchdistillYaml(path));
  Import out;
  Context context(out);
  KD_RETURN_IF_ERROR(ImportRoot(context, *root, options, path));
  return out;
}

}  // namespace torchdistill
}  // namespace kd
