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

// A pretrained weight file a torchdistill config asks for: torchvision's *_Weights (the files
// torch.hub downloads, by the file names of torchvision 0.29's URLs) or torchdistill's own CIFAR
// checkpoints (its models' MODEL_URL_DICT).
struct PretrainedFile {
  std::string file;  // the download's file name
  std::string what;  // "torchvision's ResNet34_Weights.IMAGENET1K_V1"
  std::string make;  // the command that downloads it there
};

struct TorchvisionWeights {
  const char* model;
  const char* enum_class;
  const char* name;
  const char* file;
};
constexpr TorchvisionWeights kTorchvisionWeights[] = {
    {"resnet18", "ResNet18_Weights", "IMAGENET1K_V1", "resnet18-f37072fd.pth"},
    {"resnet34", "ResNet34_Weights", "IMAGENET1K_V1", "resnet34-b627a593.pth"},
    {"resnet50", "ResNet50_Weights", "IMAGENET1K_V1", "resnet50-0676ba61.pth"},
    {"resnet50", "ResNet50_Weights", "IMAGENET1K_V2", "resnet50-11ad3fa6.pth"},
    {"resnet101", "ResNet101_Weights", "IMAGENET1K_V1", "resnet101-63fe2227.pth"},
    {"resnet101", "ResNet101_Weights", "IMAGENET1K_V2", "resnet101-cd907fc2.pth"},
    {"resnet152", "ResNet152_Weights", "IMAGENET1K_V1", "resnet152-394f9c45.pth"},
    {"resnet152", "ResNet152_Weights", "IMAGENET1K_V2", "resnet152-f82ba261.pth"},
    {"wide_resnet50_2", "Wide_ResNet50_2_Weights", "IMAGENET1K_V1", "wide_resnet50_2-95faca4d.pth"},
    {"wide_resnet50_2", "Wide_ResNet50_2_Weights", "IMAGENET1K_V2", "wide_resnet50_2-9ba9bcbe.pth"},
    {"wide_resnet101_2", "Wide_ResNet101_2_Weights", "IMAGENET1K_V1",
     "wide_resnet101_2-32ee1156.pth"},
    {"wide_resnet101_2", "Wide_ResNet101_2_Weights", "IMAGENET1K_V2",
     "wide_resnet101_2-d733dc28.pth"},
    // DenseNet files name the dense layers' modules in torchvision's first form ("norm.1"):
    // Model::LoadState renames them as torchvision does.
    {"densenet121", "DenseNet121_Weights", "IMAGENET1K_V1", "densenet121-a639ec97.pth"},
    {"densenet161", "DenseNet161_Weights", "IMAGENET1K_V1", "densenet161-8d451a50.pth"},
    {"densenet169", "DenseNet169_Weights", "IMAGENET1K_V1", "densenet169-b2777c0a.pth"},
    {"densenet201", "DenseNet201_Weights", "IMAGENET1K_V1", "densenet201-c1103571.pth"},
    {"alexnet", "AlexNet_Weights", "IMAGENET1K_V1", "alexnet-owt-7be5be79.pth"},
    {"inception_v3", "Inception_V3_Weights", "IMAGENET1K_V1", "inception_v3_google-0cc3c7bd.pth"},
    {"mobilenet_v2", "MobileNet_V2_Weights", "IMAGENET1K_V1", "mobilenet_v2-b0353104.pth"},
    {"mobilenet_v2", "MobileNet_V2_Weights", "IMAGENET1K_V2", "mobilenet_v2-7ebf99e0.pth"},
    {"mobilenet_v3_large", "MobileNet_V3_Large_Weights", "IMAGENET1K_V1",
     "mobilenet_v3_large-8738ca79.pth"},
    {"mobilenet_v3_large", "MobileNet_V3_Large_Weights", "IMAGENET1K_V2",
     "mobilenet_v3_large-5c1a4163.pth"},
    {"mobilenet_v3_small", "MobileNet_V3_Small_Weights", "IMAGENET1K_V1",
     "mobilenet_v3_small-047dcff4.pth"},
    {"efficientnet_b0", "EfficientNet_B0_Weights", "IMAGENET1K_V1",
     "efficientnet_b0_rwightman-7f5810bc.pth"},
    {"efficientnet_b1", "EfficientNet_B1_Weights", "IMAGENET1K_V1",
     "efficientnet_b1_rwightman-bac287d4.pth"},
    {"efficientnet_b1", "EfficientNet_B1_Weights", "IMAGENET1K_V2", "efficientnet_b1-c27df63c.pth"},
    {"efficientnet_b2", "EfficientNet_B2_Weights", "IMAGENET1K_V1",
     "efficientnet_b2_rwightman-c35c1473.pth"},
    {"efficientnet_b3", "EfficientNet_B3_Weights", "IMAGENET1K_V1",
     "efficientnet_b3_rwightman-b3899882.pth"},
    {"efficientnet_b4", "EfficientNet_B4_Weights", "IMAGENET1K_V1",
     "efficientnet_b4_rwightman-23ab8bcd.pth"},
    {"efficientnet_b5", "EfficientNet_B5_Weights", "IMAGENET1K_V1",
     "efficientnet_b5_lukemelas-1a07897c.pth"},
    {"efficientnet_b6", "EfficientNet_B6_Weights", "IMAGENET1K_V1",
     "efficientnet_b6_lukemelas-24a108a5.pth"},
    {"efficientnet_b7", "EfficientNet_B7_Weights", "IMAGENET1K_V1",
     "efficientnet_b7_lukemelas-c5b4e57e.pth"},
};
// HND/GHND's bottleneck-injected students: the torchvision model whose weights they start from
// (the original's children they keep load from its file; the bottleneck starts at random).
constexpr std::pair<const char*, const char*> kCustomModelOrigins[] = {
    {"custom_resnet152", "resnet152"},
    {"custom_densenet169", "densenet169"},
    {"custom_densenet201", "densenet201"},
    {"custom_inception_v3", "inception_v3"}};
// torchdistill's CIFAR checkpoints (cifar<classes>-<model>.pt).
constexpr const char* kTorchdistillCheckpoints[] = {"cifar10-densenet_bc_k12_depth100",
                                                    "cifar100-densenet_bc_k12_depth100",
                                                    "cifar10-resnet20",
                                                    "cifar10-resnet32",
                                                    "cifar10-resnet44",
                                                    "cifar10-resnet56",
                                                    "cifar10-resnet110",
                                                    "cifar10-wide_resnet40_4",
                                                    "cifar10-wide_resnet28_10",
                                                    "cifar10-wide_resnet16_8",
                                                    "cifar100-wide_resnet40_4",
                                                    "cifar100-wide_resnet28_10",
                                                    "cifar100-wide_resnet16_8"};

// The file `value` (a model's `weights` or `pretrained` kwarg) names for the torchdistill model
// `model` with `num_classes` (-1: not given), or nullopt with `why`.
std::optional<PretrainedFile> FindPretrainedFile(const std::string& model, const YamlValue& value,
                                                 int64_t num_classes, std::string* why) {
  std::string name;  // a weights enum's member: IMAGENET1K_V1, DEFAULT
  if (value.kind == Kind::kBool) {
    name = "IMAGENET1K_V1";  // torchvision's legacy pretrained=True
    const std::string key = absl::StrCat("cifar", num_classes < 0 ? 10 : num_classes, "-", model);
    for (const char* known : kTorchdistillCheckpoints) {
      if (key == known) {
        return PretrainedFile{
            key + ".pt", "torchdistill's pretrained " + key,
            absl::StrCat("~/.cache/libkd/venv/bin/python -c \"import torch; "
                         "torch.hub.load_state_dict_from_url('https://github.com/"
                         "yoshitomo-matsubara/torchdistill/releases/download/v0.1.1/",
                         key,
                         ".pt')\" (the release's tag as torchdistill's MODEL_URL_DICT "
                         "gives it)")};
      }
    }
  } else if (value.kind == Kind::kString) {
    name = value.text;
  } else if (value.kind == Kind::kCall && value.tag == "!import_get" &&
             value.Find("key") != nullptr) {
    name = value.Find("key")->text;
  } else if (value.kind == Kind::kCall && value.tag == "!getattr" && value.items.size() == 2 &&
             value.items[1]->kind == Kind::kString) {
    name = value.items[1]->text;  // !getattr [*weights_enum, 'IMAGENET1K_V1']
  } else {
    *why = "torchvision's weights are an !import_get of a *_Weights member, a !getattr of one "
           "or its name";
    return std::nullopt;
  }
  name = name.substr(name.rfind('.') + 1);
  std::vector<std::string> known;
  const char* default_name = nullptr;
  for (const TorchvisionWeights& w : kTorchvisionWeights) {
    if (model != w.model) continue;
    known.push_back(w.name);
    default_name = w.name;  // the last listed: torchvision's DEFAULT
  }
  if (known.empty()) {
    *why = absl::StrCat("libkd knows no pretrained weights of \"", model,
                        "\" (torchvision's classifiers' and torchdistill's CIFAR checkpoints)");
    return std::nullopt;
  }
  if (name == "DEFAULT") name = default_name;
  for (const TorchvisionWeights& w : kTorchvisionWeights) {
    if (model == w.model && name == w.name) {
      return PretrainedFile{
          w.file, absl::StrCat("torchvision's ", w.enum_class, ".", w.name),
          absl::StrCat(
              "~/.cache/libkd/venv/bin/python -c \"import torchvision; torchvision.models.",
              w.model, "(weights='", w.name, "')\"")};
    }
  }
  *why = absl::StrCat("torchvision's ", model, " has the weights ", absl::StrJoin(known, ", "),
                      " and DEFAULT, not ", name);
  return std::nullopt;
}


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
        std::string origin = name;  // whose weight file
        for (const auto& [custom, original] : kCustomModelOrigins) {
          if (name == custom) origin = original;
        }
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
