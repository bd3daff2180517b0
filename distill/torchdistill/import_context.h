// What the parts of the torchdistill importer share: the report, typed reads of YAML values
// with their positions, kwargs from YAML mappings (checked against the libkd plugin's kwargs
// contract), and mappings whose every key must be taken or reported.
#ifndef LIBKD_DISTILL_TORCHDISTILL_IMPORT_CONTEXT_H_
#define LIBKD_DISTILL_TORCHDISTILL_IMPORT_CONTEXT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "distill/config/distill_config.pb.h"
#include "distill/torchdistill/importer.h"
#include "distill/torchdistill/yaml_value.h"
#include "google/protobuf/repeated_field.h"

namespace kd {
namespace torchdistill {

// `path` with torchdistill's negative indices ("layer1.-1.relu") replaced by the child they
// name among `module_paths` (a model's NamedModules, in order: "-1" is the last child of the
// path before it); as it is where a prefix has no such child.
std::string ResolveNegativeIndices(const std::string& path,
                                   const std::vector<std::string>& module_paths);

class Context {
 public:
  explicit Context(Import& out) : out_(out) {}

  void Unsupported(const YamlValue& at, const std::string& what, const std::string& why) {
    out_.unsupported.push_back(absl::StrCat(at.Where(), ": ", what, " is not supported: ", why));
  }
  void Note(const YamlValue& at, const std::string& what, const std::string& text) {
    out_.notes.push_back(absl::StrCat(at.Where(), ": ", what, ": ", text));
  }
  // Reports `what` as unsupported: why `present` where libkd's `kind` registry has `key`, else
  // `absent` followed by the registry's nearest and registered keys.
  void UnsupportedPlugin(const YamlValue& at, const std::string& what, const std::string& kind,
                         const std::string& key, const std::string& present,
                         const std::string& absent);
  DistillConfig& config() { return out_.config; }

  // The stage's models torchdistill wraps (auxiliary_model_wrapper): their module paths lose
  // the wrapper's prefix ("model."), and the wrapper's own submodules are libkd auxiliary
  // modules (the wrapper's path of each -> the module's name); so are the adaptations a
  // sequential places ("+name" -> "name"), wrapped or not.
  struct Wrapped {
    bool on = false;
    std::string prefix;
    std::map<std::string, std::string> aux_names;
    // "+name" entries that are the model's own child `name` (model_import.cc's IsOwnChild).
    std::map<std::string, std::string> own_children;
    std::set<std::string> unneeded;  // the wrapper's submodules libkd has no need of
  };
  Wrapped& wrapped(bool teacher) { return wrapped_[teacher ? 1 : 0]; }
  void ResetWrapped() { wrapped_[0] = wrapped_[1] = Wrapped(); }
  // `path` of the teacher's or the student's, as libkd names it.
  std::string ModelPath(bool teacher, const std::string& path) const {
    const Wrapped& w = wrapped_[teacher ? 1 : 0];
    if (auto it = w.aux_names.find(path); it != w.aux_names.end()) return it->second;
    if (auto it = w.own_children.find(path); it != w.own_children.end()) return it->second;
    const std::string own =
        w.on && path.starts_with(w.prefix) ? path.substr(w.prefix.size()) : path;
    return ResolveNegativeIndices(own, module_paths_[teacher ? 1 : 0]);
  }
  // The model's module paths (ImportOptions.module_paths), for negative indices.
  void SetModulePaths(bool teacher, std::vector<std::string> paths) {
    module_paths_[teacher ? 1 : 0] = std::move(paths);
  }
  // Whether `path` (libkd's) names one of the model's auxiliary modules.
  bool IsAuxModule(bool teacher, const std::string& path) const {
    for (const auto& [_, name] : wrapped_[teacher ? 1 : 0].aux_names) {
      if (name == path) return true;
    }
    return false;
  }

  // InvalidArgument "file:line:col: <what> must be <expected>, not <what it is>".
  static absl::Status WrongType(const YamlValue& v, const std::string& what,
                                const std::string& expected);
  // An integer in [min, max] (by default int32's range, the range of libkd's counts and
  // sizes): out of it, an error naming the bound, never a value cut to fit.
  static absl::StatusOr<int64_t> Int(const YamlValue& v, const std::string& what,
                                     int64_t min = std::numeric_limits<int32_t>::min(),
                                     int64_t max = std::numeric_limits<int32_t>::max());
  static absl::StatusOr<double> Number(const YamlValue& v, const std::string& what);
  static absl::StatusOr<bool> Bool(const YamlValue& v, const std::string& what);
  static absl::StatusOr<std::string> String(const YamlValue& v, const std::string& what);
  // A list of strings (null: empty).
  static absl::StatusOr<std::vector<std::string>> Strings(const YamlValue& v,
                                                          const std::string& what);

  // `map`'s entries as kwargs of the `kind` plugin `key` (kinds of plugin_kinds.h): scalars,
  // lists and nested mappings; None (null) left out, as it means the default; a Python value
  // (!import_call...) reported. Names the plugin's contract does not have are reported; an
  // integer where the contract wants a number becomes one.
  absl::Status Kwargs(const YamlValue* map, const std::string& kind, const std::string& key,
                      const std::string& what, google::protobuf::RepeatedPtrField<Kwarg>* out);
  // One value as a kwarg; false (reported) where it has no kwarg form.
  absl::StatusOr<bool> ToKwarg(const YamlValue& v, const std::string& name, const std::string& what,
                               Kwarg* out);

 private:
  Import& out_;
  Wrapped wrapped_[2];
  std::vector<std::string> module_paths_[2];
};

// A mapping whose keys are each taken by the translation; Finish reports the others as
// unsupported (keys from "_": anchors' holders, skipped as torchdistill skips them).
class Keys {
 public:
  // InvalidArgument if `map` is neither a mapping nor null.
  static absl::StatusOr<Keys> Of(const YamlValue* map, const std::string& what);

  const YamlValue* Take(const std::string& key);
  // `key`, or else torchdistill 0.x's `old_key` for it (type for key, params for kwargs, factor
  // for weight), with a note.
  const YamlValue* TakeOr(Context& context, const std::string& key, const std::string& old_key);
  // Reports each key not taken: "<what>.<key> is not supported: <why>".
  void Finish(Context& context, const std::string& why);

 private:
  const YamlValue* map_ = nullptr;
  std::string what_;
  std::set<std::string> taken_;
  // The map's entries by key (a map may hold 100,000 keys: Take must not scan them).
  std::unordered_map<std::string, const YamlValue*> index_;
};

// Why a key with no translation is reported, where nothing more specific is known.
inline constexpr char kUnknownKey[] =
    "torchdistill does not read it there either, or libkd has no "
    "such setting (docs/torchdistill_import.md lists what maps)";

// A pretrained weight file a torchdistill config asks for: torchvision's *_Weights (the files
// torch.hub downloads, by the file names of torchvision 0.29's URLs) or torchdistill's own CIFAR
// checkpoints (its models' MODEL_URL_DICT).
struct PretrainedFile {
  std::string file;  // the download's file name
  std::string what;  // "torchvision's ResNet34_Weights.IMAGENET1K_V1"
  std::string make;  // the command that downloads it there
};
// The file `value` (a model's `weights` or `pretrained` kwarg) names for the torchdistill model
// `model` with `num_classes` (-1: not given), or nullopt with `why` (pretrained_weights.cc).
std::optional<PretrainedFile> FindPretrainedFile(const std::string& model, const YamlValue& value,
                                                 int64_t num_classes, std::string* why);
// The model whose weight file `model` starts from: HND/GHND's custom_* students their original's
// (custom_resnet152: resnet152), any other itself.
std::string WeightsOrigin(const std::string& model);

// The forward process of a model torchdistill's EmptyModule stands in for (distill/procs).
inline constexpr char kIdentityProc[] = "identity";

// Parts of the translation (dataset_import.cc, transform_import.cc, model_import.cc, aux_wrapper_import.cc,
// criterion_import.cc, stage_import.cc).
absl::Status ImportAuxWrapper(Context& context, const YamlValue& wrapper, const std::string& what,
                              bool teacher, StageModelConfig* out);
absl::Status ImportStageModel(Context& context, const YamlValue& model, const std::string& what,
                              bool teacher, StageModelConfig* out);
absl::Status ImportDataset(Context& context, const YamlValue& value, const std::string& what,
                           DatasetConfig* out);
// A torchvision image dataset libkd reads itself: its libkd key, where torchvision's root keeps
// the files libkd reads, and the images' size and channels (for the transforms).
struct ImageDataset {
  const char* torchvision;  // torchvision.datasets.<name>
  const char* key;
  const char* folder;  // under torchvision's root ("" : root itself)
  int64_t size;
  int channels;
};
// torchvision's transforms on such a dataset as the libkd dataset's kwargs (transform_import.cc).
absl::Status ImportTransforms(Context& context, const YamlValue& transform, const std::string& what,
                              const ImageDataset& dataset, DatasetConfig* out);
// torchvision's transforms on an ImageFolder as the image_folder dataset's kwargs.
absl::Status ImportFolderTransforms(Context& context, const YamlValue& transform,
                                    const std::string& what, DatasetConfig* out);
// 1.x's !access_by_index_or_key {data: !import_call torchdistill.datasets.util.split_dataset
// {dataset, lengths, generator_seed, sub_splits_configs}, index_or_key: i}: part i of the split of
// the dataset (its sub-split's transform in place of the dataset's), as `out`.
absl::Status ImportSplitDatasetPart(Context& context, const YamlValue& access,
                                    const std::string& what, DatasetConfig* out);
// torchdistill 0.x's (and early 1.x's) dataset with `splits`: a libkd dataset per split, each
// as the !import_call of torchvision.datasets.<key> it stands for.
absl::Status ImportSplitDatasets(Context& context, const YamlValue& value, const std::string& what,
                                 DistillConfig* config);
absl::Status ImportStage(Context& context, const YamlValue& stage, const std::string& name,
                         const std::string& what, StageConfig* out);
absl::Status ImportCriterion(Context& context, const YamlValue& criterion, const std::string& what,
                             CriterionConfig* out);
// torchdistill 0.x's criterion ({type, org_term, sub_terms}) as the 1.x WeightedSumLoss it stands
// for (zero_x_criterion.cc).
absl::StatusOr<std::shared_ptr<YamlValue>> ZeroXCriterionAsOneX(Context& context,
                                                                const YamlValue& criterion,
                                                                const std::string& what);
absl::Status ImportLoader(Context& context, const YamlValue& loader, const std::string& what,
                          LoaderConfig* out);

}  // namespace torchdistill
}  // namespace kd

#endif  // LIBKD_DISTILL_TORCHDISTILL_IMPORT_CONTEXT_H_
