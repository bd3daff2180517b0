// torchdistill's datasets: !import_call of torchvision's FashionMNIST, CIFAR10 and CIFAR100
// (with their transforms), ImageFolder (with RandomResizedCrop, Resize, CenterCrop, flips and
// Normalize) and FakeData, and torch's Subset of a range, as libkd's datasets; others reported.
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "distill/torchdistill/import_context.h"

namespace kd {
namespace torchdistill {
namespace {

using Kind = YamlValue::Kind;

constexpr ImageDataset kImageDatasets[] = {
    {"torchvision.datasets.FashionMNIST", "fashion_mnist", "FashionMNIST/raw", 28, 1},
    {"torchvision.datasets.CIFAR10", "cifar10", "", 32, 3},
    {"torchvision.datasets.CIFAR100", "cifar100", "", 32, 3},
};

}  // namespace

absl::Status ImportDataset(Context& context, const YamlValue& value, const std::string& what,
                           DatasetConfig* out) {
  if (value.kind == Kind::kCall && value.tag == "!access_by_index_or_key") {
    return ImportSplitDatasetPart(context, value, what, out);
  }
  if (value.kind != Kind::kCall || value.tag != "!import_call") {
    return Context::WrongType(value, what, "an !import_call of a dataset");
  }
  KD_ASSIGN_OR_RETURN(Keys call, Keys::Of(&value, what));
  const YamlValue* key = call.Take("key");
  const YamlValue* init = call.Take("init");
  call.Finish(context, "an !import_call takes key and init");
  if (key == nullptr) return Context::WrongType(value, what + ".key", "given");
  KD_ASSIGN_OR_RETURN(std::string name, Context::String(*key, what + ".key"));
  KD_ASSIGN_OR_RETURN(Keys init_keys, Keys::Of(init, what + ".init"));
  const YamlValue* kwargs = init_keys.Take("kwargs");
  if (const YamlValue* args = init_keys.Take("args");
      args != nullptr && args->kind == Kind::kList && !args->items.empty()) {
    context.Unsupported(*args, what + ".init.args", "give the dataset's arguments as kwargs");
  }
  init_keys.Finish(context, "an !import_call's init takes args and kwargs");
  KD_ASSIGN_OR_RETURN(Keys kw, Keys::Of(kwargs, what + ".init.kwargs"));
  const std::string at = what + ".init.kwargs";
  if (name == "torch.utils.data.Subset") {
    const YamlValue* dataset = kw.Take("dataset");
    const YamlValue* indices = kw.Take("indices");
    kw.Finish(context, "Subset takes dataset and indices");
    if (dataset == nullptr || indices == nullptr) {
      return Context::WrongType(value, at, "a Subset's dataset and indices");
    }
    KD_RETURN_IF_ERROR(ImportDataset(context, *dataset, at + ".dataset", out));
    // indices: !import_call {key: builtins.range, init: {args: [start, stop]}}
    const YamlValue* range_key = indices->kind == Kind::kCall ? indices->Find("key") : nullptr;
    const YamlValue* range_init = indices->kind == Kind::kCall ? indices->Find("init") : nullptr;
    const YamlValue* range_args = range_init != nullptr ? range_init->Find("args") : nullptr;
    if (range_key == nullptr ||
        (range_key->text != "builtins.range" && range_key->text != "range") ||
        range_args == nullptr || range_args->kind != Kind::kList || range_args->items.empty() ||
        range_args->items.size() > 2) {
      context.Unsupported(*indices, at + ".indices",
                          "libkd's subsets are ranges: !import_call {key: 'builtins.range', "
                          "init: {args: [start, stop]}}");
      return absl::OkStatus();
    }
    KD_ASSIGN_OR_RETURN(int64_t first, Context::Int(*range_args->items[0], at + ".indices start",
                                                    std::numeric_limits<int64_t>::min(),
                                                    std::numeric_limits<int64_t>::max()));
    if (range_args->items.size() == 1) {
      out->mutable_subset()->set_stop(first);
    } else {
      KD_ASSIGN_OR_RETURN(int64_t stop, Context::Int(*range_args->items[1], at + ".indices stop",
                                                     std::numeric_limits<int64_t>::min(),
                                                     std::numeric_limits<int64_t>::max()));
      if (first != 0) out->mutable_subset()->set_start(first);
      out->mutable_subset()->set_stop(stop);
    }
    return absl::OkStatus();
  }
  if (name == "torchvision.datasets.FakeData") {  // synthetic images: libkd's own
    out->set_key("synthetic");
    context.Note(*key, what + " FakeData",
                 "libkd's synthetic images (seeded Gaussian noise and classes), not torchvision's");
    if (const YamlValue* v = kw.Take("size")) {
      KD_ASSIGN_OR_RETURN(int64_t size, Context::Int(*v, at + ".size"));
      Kwarg* kwarg = out->add_kwargs();
      kwarg->set_name("num_samples");
      kwarg->set_integer(size);
    }
    if (const YamlValue* v = kw.Take("num_classes")) {
      KD_ASSIGN_OR_RETURN(int64_t classes, Context::Int(*v, at + ".num_classes"));
      Kwarg* kwarg = out->add_kwargs();
      kwarg->set_name("num_classes");
      kwarg->set_integer(classes);
    }
    if (const YamlValue* v = kw.Take("image_size")) {
      if (v->kind != Kind::kList || v->items.size() != 3) {
        return Context::WrongType(*v, at + ".image_size", "[channels, height, width]");
      }
      const char* names[] = {"channels", "height", "width"};
      for (int i = 0; i < 3; ++i) {
        KD_ASSIGN_OR_RETURN(int64_t n, Context::Int(*v->items[i], at + ".image_size"));
        Kwarg* kwarg = out->add_kwargs();
        kwarg->set_name(names[i]);
        kwarg->set_integer(n);
      }
    }
    if (const YamlValue* v = kw.Take("random_offset")) {
      KD_ASSIGN_OR_RETURN(
          int64_t seed, Context::Int(*v, at + ".random_offset", std::numeric_limits<int64_t>::min(),
                                     std::numeric_limits<int64_t>::max()));
      Kwarg* kwarg = out->add_kwargs();
      kwarg->set_name("seed");
      kwarg->set_integer(seed);
    }
    if (const YamlValue* v = kw.Take("transform"); v != nullptr && v->kind != Kind::kNull) {
      const YamlValue* transform_key = v->Find("key");
      if (transform_key == nullptr || !absl::EndsWith(transform_key->text, ".ToTensor")) {
        context.Unsupported(*v, at + ".transform",
                            "libkd's synthetic images take no transform "
                            "but ToTensor's");
      }
    }
    kw.Finish(context,
              "libkd's synthetic dataset takes size, image_size, num_classes, "
              "random_offset and transform");
    return absl::OkStatus();
  }
  if (name == "torchvision.datasets.ImageFolder") {
    out->set_key("image_folder");
    if (const YamlValue* v = kw.Take("root"); v != nullptr && v->kind != Kind::kNull) {
      KD_ASSIGN_OR_RETURN(std::string root, Context::String(*v, at + ".root"));
      Kwarg* kwarg = out->add_kwargs();
      kwarg->set_name("root");
      kwarg->set_str(ExpandUser(root));  // as torchvision does
    }
    if (const YamlValue* v = kw.Take("transform"); v != nullptr && v->kind != Kind::kNull) {
      KD_RETURN_IF_ERROR(ImportFolderTransforms(context, *v, at + ".transform", out));
    }
    kw.Finish(context, "libkd's image_folder takes root and transform");
    return absl::OkStatus();
  }
  const ImageDataset* image = nullptr;
  for (const ImageDataset& d : kImageDatasets) {
    if (name == d.torchvision) image = &d;
  }
  if (image == nullptr) {
    out->set_key(name);
    context.Unsupported(*key, absl::StrCat(what, " ", name),
                        "register a libkd dataset under a key (distill/data/dataset.h: "
                        "DatasetRegistry) and give that key here; the imported config keeps \"" +
                            name + "\" as the key, which validation names");
    return absl::OkStatus();
  }
  out->set_key(image->key);
  Kwarg* split = out->add_kwargs();
  split->set_name("split");
  split->set_str("train");
  if (const YamlValue* v = kw.Take("train")) {
    KD_ASSIGN_OR_RETURN(bool train, Context::Bool(*v, at + ".train"));
    split->set_str(train ? "train" : "test");
  }
  if (const YamlValue* v = kw.Take("root"); v != nullptr && v->kind != Kind::kNull) {
    KD_ASSIGN_OR_RETURN(std::string root, Context::String(*v, at + ".root"));
    root = ExpandUser(root);  // as torchvision does
    Kwarg* kwarg = out->add_kwargs();
    kwarg->set_name("root");  // fashion_mnist: torchvision keeps the IDX files under it
    kwarg->set_str(*image->folder == '\0' ? root
                                          : (std::filesystem::path(root) / image->folder).string());
  }
  if (const YamlValue* v = kw.Take("download"); v != nullptr && v->boolean) {
    context.Note(
        *v, at + ".download",
        std::string(image->channels == 1 ? "left out: libkd reads local files (Debian's "
                                           "dataset-fashion-mnist, or root)"
                                         : "left out: libkd reads the binary version's files under "
                                           "root (tools/cifar_to_binary.py converts torchvision's "
                                           "download)"));
  }
  if (const YamlValue* v = kw.Take("transform"); v != nullptr && v->kind != Kind::kNull) {
    KD_RETURN_IF_ERROR(ImportTransforms(context, *v, at + ".transform", *image, out));
  }
  kw.Finish(context, absl::StrCat("libkd's ", image->key, " takes train, root and transform"));
  return absl::OkStatus();
}

}  // namespace torchdistill
}  // namespace kd
