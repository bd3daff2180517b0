// torchdistill 0.x's (and early 1.x's) datasets with `splits` ({key|type: CIFAR10, splits: {NAME:
// {dataset_id, kwargs|params: {..., transform_configs|transform_params: [{key|type,
// kwargs|params}]}, random_split}}}): each split rewritten as the !import_call of
// torchvision.datasets.<key> it stands for and imported as 1.x's (dataset_import.cc); a split's
// random_split as a dataset per sub-split, part i of libkd's seeded random split
// (SubsetConfig.random_split with split_dataset's lengths rule: torch's own indices). And 1.x's
// form: !access_by_index_or_key {data: !import_call torchdistill.datasets.util.split_dataset,
// index_or_key: i} as part i of the same.
#include <algorithm>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "distill/torchdistill/import_context.h"

namespace kd {
namespace torchdistill {
namespace {

using Kind = YamlValue::Kind;

// !import_call {key: `key`, init: {kwargs: `kwargs`}} (no kwargs where null).
std::shared_ptr<YamlValue> MadeCall(const std::string& key, const YamlValue* kwargs,
                                    const YamlValue& at) {
  auto init = Made(Kind::kMap, at);
  if (kwargs != nullptr && kwargs->kind != Kind::kNull) {
    init->entries.emplace_back("kwargs", std::make_shared<YamlValue>(*kwargs));
  }
  auto call = Made(Kind::kCall, at);
  call->tag = "!import_call";
  call->entries.emplace_back("key", MadeString(key, at));
  call->entries.emplace_back("init", init);
  return call;
}
// The first of `names` that `map` has.
const YamlValue* FindEither(const YamlValue& map, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (const YamlValue* v = map.Find(name)) return v;
  }
  return nullptr;
}

// The !import_call of torchvision.datasets.<class_name> a split stands for: its kwargs but the
// transforms, and the transforms (`transforms`, else the kwargs' transform_configs or
// transform_params: [{key|type, kwargs|params}]) as one Compose.
absl::StatusOr<std::shared_ptr<YamlValue>> SplitCall(const std::string& class_name,
                                                     const YamlValue* kwargs,
                                                     const YamlValue* transforms,
                                                     const YamlValue& at, const std::string& what) {
  auto call_kwargs = Made(Kind::kMap, kwargs != nullptr ? *kwargs : at);
  if (kwargs != nullptr && kwargs->kind == Kind::kMap) {
    for (const auto& [name, v] : kwargs->entries) {
      if (name == "transform_configs" || name == "transform_params") {
        if (transforms == nullptr) transforms = v.get();
      } else {
        call_kwargs->entries.emplace_back(name, v);
      }
    }
  }
  if (transforms != nullptr && transforms->kind != Kind::kNull) {
    if (transforms->kind != Kind::kList) {
      return Context::WrongType(*transforms, what + " transforms", "a list of transforms");
    }
    auto steps = Made(Kind::kList, *transforms);
    for (const auto& step : transforms->items) {
      const YamlValue* step_key =
          step->kind == Kind::kMap ? FindEither(*step, {"key", "type"}) : nullptr;
      if (step_key == nullptr || step_key->kind != Kind::kString) {
        return Context::WrongType(*step, what + " transforms", "{key, kwargs} each");
      }
      steps->items.push_back(MadeCall("torchvision.transforms." + step_key->text,
                                      FindEither(*step, {"kwargs", "params"}), *step));
    }
    auto compose_kwargs = Made(Kind::kMap, *transforms);
    compose_kwargs->entries.emplace_back("transforms", steps);
    call_kwargs->entries.emplace_back(
        "transform", MadeCall("torchvision.transforms.Compose", compose_kwargs.get(), *transforms));
  }
  return MadeCall("torchvision.datasets." + class_name, call_kwargs.get(), at);
}

// A split's random_split {lengths, generator_seed, sub_splits: [{dataset_id, transforms}]}: a
// dataset per sub-split, part i of the seeded split of what the split's kwargs build.
absl::Status ImportRandomSplit(Context& context, const std::string& class_name,
                               const YamlValue* kwargs, const YamlValue& random_split,
                               const YamlValue& type, const std::string& what,
                               DistillConfig* config) {
  KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(&random_split, what));
  const YamlValue* lengths = keys.Take("lengths");
  const YamlValue* seed = keys.Take("generator_seed");
  const YamlValue* subs = keys.Take("sub_splits");
  keys.Finish(context, "a random_split has lengths, generator_seed and sub_splits");
  if (lengths == nullptr || lengths->kind != Kind::kList || subs == nullptr ||
      subs->kind != Kind::kList || subs->items.size() != lengths->items.size()) {
    return Context::WrongType(random_split, what,
                              "lengths and as many sub_splits ({dataset_id, transform_configs})");
  }
  RandomSplitConfig split;
  for (const auto& l : lengths->items) {
    KD_ASSIGN_OR_RETURN(double value, Context::Number(*l, what + ".lengths"));
    split.add_lengths(value);
  }
  if (seed != nullptr && seed->kind != Kind::kNull) {
    KD_ASSIGN_OR_RETURN(int64_t s, Context::Int(*seed, what + ".generator_seed",
                                                std::numeric_limits<int64_t>::min(),
                                                std::numeric_limits<int64_t>::max()));
    split.set_seed(s);
  } else {
    context.Unsupported(random_split, what + " without generator_seed",
                        "torch draws that split from its global generator, which libkd cannot "
                        "reproduce: give generator_seed");
  }
  for (size_t i = 0; i < subs->items.size(); ++i) {
    const YamlValue& sub = *subs->items[i];
    const std::string at = absl::StrCat(what, ".sub_splits[", i, "]");
    KD_ASSIGN_OR_RETURN(Keys sub_keys, Keys::Of(&sub, at));
    const YamlValue* id = sub_keys.Take("dataset_id");
    const YamlValue* transforms = sub_keys.Take("transform_configs");
    if (transforms == nullptr) transforms = sub_keys.Take("transform_params");
    sub_keys.Finish(context, "a sub-split has dataset_id and transform_configs");
    if (id == nullptr) return Context::WrongType(sub, at + ".dataset_id", "given");
    KD_ASSIGN_OR_RETURN(std::string dataset_id, Context::String(*id, at + ".dataset_id"));
    KD_ASSIGN_OR_RETURN(std::shared_ptr<YamlValue> call,
                        SplitCall(class_name, kwargs, transforms, type, at));
    DatasetConfig* out = config->add_datasets();
    out->set_id(dataset_id);
    KD_RETURN_IF_ERROR(ImportDataset(context, *call, at, out));
    *out->mutable_subset()->mutable_random_split() = split;
    out->mutable_subset()->mutable_random_split()->set_part(static_cast<int>(i));
    out->mutable_subset()->mutable_random_split()->set_lengths_rule(
        RandomSplitConfig::SPLIT_DATASET);
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// `call` (a dataset's !import_call) with its init.kwargs.transform replaced by `transform`.
std::shared_ptr<YamlValue> WithTransform(const YamlValue& call, const YamlValue& transform) {
  auto out = std::make_shared<YamlValue>(call);
  const YamlValue* init = call.Find("init");
  auto new_init = init != nullptr ? std::make_shared<YamlValue>(*init) : Made(Kind::kMap, call);
  if (new_init->kind == Kind::kNull) new_init = Made(Kind::kMap, call);
  const YamlValue* kwargs = new_init->Find("kwargs");
  auto new_kwargs = kwargs != nullptr && kwargs->kind == Kind::kMap
                        ? std::make_shared<YamlValue>(*kwargs)
                        : Made(Kind::kMap, call);
  std::erase_if(new_kwargs->entries, [](const auto& e) { return e.first == "transform"; });
  new_kwargs->entries.emplace_back("transform", std::make_shared<YamlValue>(transform));
  std::erase_if(new_init->entries, [](const auto& e) { return e.first == "kwargs"; });
  new_init->entries.emplace_back("kwargs", new_kwargs);
  std::erase_if(out->entries, [](const auto& e) { return e.first == "init"; });
  out->entries.emplace_back("init", new_init);
  return out;
}

}  // namespace

absl::Status ImportSplitDatasetPart(Context& context, const YamlValue& access,
                                    const std::string& what, DatasetConfig* out) {
  KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(&access, what));
  const YamlValue* data = keys.Take("data");
  const YamlValue* index = keys.Take("index_or_key");
  keys.Finish(context, "!access_by_index_or_key takes data and index_or_key");
  const YamlValue* key = data != nullptr && data->kind == Kind::kCall ? data->Find("key") : nullptr;
  if (key == nullptr || data->tag != "!import_call" ||
      (key->text != "torchdistill.datasets.util.split_dataset" &&
       key->text != "torchdistill.datasets.split_dataset")) {
    return Context::WrongType(data != nullptr ? *data : access, what + ".data",
                              "an !import_call of torchdistill.datasets.util.split_dataset (the "
                              "one dataset !access_by_index_or_key picks from)");
  }
  if (index == nullptr) return Context::WrongType(access, what + ".index_or_key", "given");
  KD_ASSIGN_OR_RETURN(int64_t part, Context::Int(*index, what + ".index_or_key",
                                                 std::numeric_limits<int32_t>::min(),
                                                 std::numeric_limits<int32_t>::max()));
  const std::string at = what + ".data.init.kwargs";
  KD_ASSIGN_OR_RETURN(Keys init_keys, Keys::Of(data->Find("init"), what + ".data.init"));
  const YamlValue* kwargs = init_keys.Take("kwargs");
  if (const YamlValue* args = init_keys.Take("args");
      args != nullptr && args->kind == Kind::kList && !args->items.empty()) {
    context.Unsupported(*args, what + ".data.init.args",
                        "give split_dataset's arguments as kwargs (dataset, lengths, "
                        "generator_seed, sub_splits_configs)");
  }
  init_keys.Finish(context, "an !import_call's init takes args and kwargs");
  KD_ASSIGN_OR_RETURN(Keys kw, Keys::Of(kwargs, at));
  const YamlValue* dataset = kw.Take("dataset");
  const YamlValue* lengths = kw.Take("lengths");
  const YamlValue* seed = kw.Take("generator_seed");
  const YamlValue* subs = kw.Take("sub_splits_configs");
  kw.Take("dataset_id");  // split_dataset only logs it
  kw.Finish(context,
            "split_dataset takes dataset, lengths, generator_seed, sub_splits_configs "
            "and dataset_id");
  if (dataset == nullptr) return Context::WrongType(*data, at + ".dataset", "given");
  RandomSplitConfig split;
  split.set_lengths_rule(RandomSplitConfig::SPLIT_DATASET);
  if (lengths == nullptr || lengths->kind == Kind::kNull) {
    split.add_lengths(9);  // split_dataset's default, (9, 1)
    split.add_lengths(1);
  } else if (lengths->kind != Kind::kList || lengths->items.empty()) {
    return Context::WrongType(*lengths, at + ".lengths", "a list of lengths");
  } else {
    for (const auto& l : lengths->items) {
      KD_ASSIGN_OR_RETURN(double value, Context::Number(*l, at + ".lengths"));
      split.add_lengths(value);
    }
  }
  const int64_t parts = split.lengths_size();
  if (part < -parts || part >= parts) {
    return Context::WrongType(*index, what + ".index_or_key",
                              absl::StrCat("an index of one of split_dataset's ", parts, " parts"));
  }
  if (part < 0) part += parts;  // Python's indexing from the end
  split.set_part(static_cast<int>(part));
  if (seed != nullptr && seed->kind != Kind::kNull) {
    KD_ASSIGN_OR_RETURN(
        int64_t s, Context::Int(*seed, at + ".generator_seed", std::numeric_limits<int64_t>::min(),
                                std::numeric_limits<int64_t>::max()));
    split.set_seed(s);
  } else {
    context.Unsupported(*data, at + " without generator_seed",
                        "torch draws that split from its global generator, which libkd cannot "
                        "reproduce: give generator_seed");
  }
  std::shared_ptr<const YamlValue> call;
  if (subs != nullptr && subs->kind != Kind::kNull) {
    if (subs->kind != Kind::kList || static_cast<int64_t>(subs->items.size()) != parts) {
      return Context::WrongType(*subs, at + ".sub_splits_configs",
                                absl::StrCat("a list of ", parts,
                                             " sub-split configs, one per "
                                             "length (split_dataset's rule)"));
    }
    const YamlValue& sub = *subs->items[part];
    const std::string sub_at = absl::StrCat(at, ".sub_splits_configs[", part, "]");
    KD_ASSIGN_OR_RETURN(Keys sub_keys, Keys::Of(&sub, sub_at));
    const YamlValue* transform = sub_keys.Take("transform");
    sub_keys.Finish(context,
                    "libkd's sub-splits take a transform (its dataset's target "
                    "transforms are its own)");
    if (transform != nullptr && transform->kind != Kind::kNull) {
      if (dataset->kind != Kind::kCall) {
        return Context::WrongType(*dataset, at + ".dataset", "an !import_call of a dataset");
      }
      call = WithTransform(*dataset, *transform);
    }
  }
  KD_RETURN_IF_ERROR(
      ImportDataset(context, call != nullptr ? *call : *dataset, at + ".dataset", out));
  if (out->has_subset()) {
    return Context::WrongType(*dataset, at + ".dataset",
                              "a dataset without a Subset of its own (libkd splits the whole)");
  }
  *out->mutable_subset()->mutable_random_split() = split;
  return absl::OkStatus();
}

absl::Status ImportSplitDatasets(Context& context, const YamlValue& value, const std::string& what,
                                 DistillConfig* config) {
  KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(&value, what));
  const YamlValue* type = keys.Take("key");
  if (type == nullptr) type = keys.Take("type");
  const YamlValue* splits = keys.Take("splits");
  for (const char* label : {"name", "root"}) {
    if (const YamlValue* v = keys.Take(label)) {
      context.Note(*v, absl::StrCat(what, ".", label), "left out: each split's kwargs say it");
    }
  }
  keys.Finish(context, "a dataset with splits has key (or type), splits, name and root");
  if (type == nullptr) return Context::WrongType(value, what + ".key", "given");
  KD_ASSIGN_OR_RETURN(std::string class_name, Context::String(*type, what + ".key"));
  if (splits->kind != Kind::kMap) return Context::WrongType(*splits, what + ".splits", "a mapping");
  for (const auto& [split, config_value] : splits->entries) {
    const std::string at = absl::StrCat(what, ".splits.", split);
    KD_ASSIGN_OR_RETURN(Keys split_keys, Keys::Of(config_value.get(), at));
    const YamlValue* id = split_keys.Take("dataset_id");
    const YamlValue* kwargs = split_keys.Take("kwargs");
    if (kwargs == nullptr) kwargs = split_keys.Take("params");
    const YamlValue* random_split = split_keys.Take("random_split");
    split_keys.Finish(context, "a split has dataset_id, kwargs (or params) and random_split");
    if (random_split != nullptr) {
      context.Note(*config_value, at,
                   "its sub-splits are the datasets (the split itself is not one in libkd)");
      KD_RETURN_IF_ERROR(ImportRandomSplit(context, class_name, kwargs, *random_split, *type,
                                           at + ".random_split", config));
      continue;
    }
    if (id == nullptr) return Context::WrongType(*config_value, at + ".dataset_id", "given");
    KD_ASSIGN_OR_RETURN(std::string dataset_id, Context::String(*id, at + ".dataset_id"));
    KD_ASSIGN_OR_RETURN(std::shared_ptr<YamlValue> call,
                        SplitCall(class_name, kwargs, nullptr, *type, at));
    DatasetConfig* out = config->add_datasets();
    out->set_id(dataset_id);
    KD_RETURN_IF_ERROR(ImportDataset(context, *call, at, out));
  }
  return absl::OkStatus();
}

}  // namespace torchdistill
}  // namespace kd
