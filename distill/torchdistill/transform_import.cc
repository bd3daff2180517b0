// torchvision's transforms as libkd datasets' kwargs: those of CIFAR and Fashion-MNIST
// (RandomCrop with padding, RandomHorizontalFlip, ToTensor, Normalize) and of ImageFolder
// (RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip, ToTensor, Normalize).
#include <cstdlib>
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

// torchvision's RandomHorizontalFlip (`step`, its kwargs `keys`) as the libkd dataset `key`'s
// horizontal_flip, which flips with p 0.5 only.
absl::Status ImportFlip(Context& context, Keys& keys, const YamlValue& step, const std::string& at,
                        const std::string& key, DatasetConfig* out) {
  double p = 0.5;
  if (const YamlValue* v = keys.Take("p")) {
    KD_ASSIGN_OR_RETURN(p, Context::Number(*v, at + ".p"));
  }
  if (p != 0.5) {
    context.Unsupported(step, at + " with p != 0.5",
                        absl::StrCat("libkd's ", key, " flips with p 0.5"));
    return absl::OkStatus();
  }
  Kwarg* flip = out->add_kwargs();
  flip->set_name("horizontal_flip");
  flip->set_boolean(true);
  return absl::OkStatus();
}

// torchvision's Normalize as the mean and std kwargs of a dataset of `channels` channels (one
// channel: numbers; more: lists).
absl::Status ImportNormalize(Keys& keys, const YamlValue& step, const std::string& at, int channels,
                             DatasetConfig* out) {
  for (const char* name_of : {"mean", "std"}) {
    const YamlValue* v = keys.Take(name_of);
    if (v == nullptr) return Context::WrongType(step, at + "." + name_of, "given");
    std::vector<const YamlValue*> values = {v};
    if (v->kind == Kind::kList) {
      values.clear();
      for (const auto& item : v->items) values.push_back(item.get());
    }
    if (static_cast<int>(values.size()) != channels) {
      return Context::WrongType(*v, at + "." + name_of,
                                absl::StrCat(channels, " value(s), one per channel"));
    }
    Kwarg* kwarg = out->add_kwargs();
    kwarg->set_name(name_of);
    for (const YamlValue* one : values) {
      KD_ASSIGN_OR_RETURN(double number, Context::Number(*one, at + "." + name_of));
      if (channels == 1) {
        kwarg->set_number(number);
      } else {
        kwarg->mutable_numbers()->add_values(number);
      }
    }
  }
  return absl::OkStatus();
}

// The steps of a dataset's transform: a Compose's transforms, or the transform itself; none
// (reported) where it is no !import_call.
absl::StatusOr<std::vector<const YamlValue*>> TransformSteps(Context& context,
                                                             const YamlValue& transform,
                                                             const std::string& what) {
  std::vector<const YamlValue*> steps;
  const YamlValue* key = transform.kind == Kind::kCall ? transform.Find("key") : nullptr;
  if (key == nullptr) {
    context.Unsupported(transform, what, "a transform is an !import_call of torchvision's");
    return steps;
  }
  if (absl::EndsWith(key->text, ".Compose")) {
    const YamlValue* init = transform.Find("init");
    const YamlValue* kwargs = init != nullptr ? init->Find("kwargs") : nullptr;
    const YamlValue* list = kwargs != nullptr ? kwargs->Find("transforms") : nullptr;
    if (list == nullptr || list->kind != Kind::kList) {
      return Context::WrongType(transform, what + " Compose", "given init.kwargs.transforms");
    }
    for (const auto& step : list->items) steps.push_back(step.get());
  } else {
    steps.push_back(&transform);
  }
  return steps;
}

// A size kwarg of torchvision's transforms: n or [n, n] (a square); nullopt (reported) else.
std::optional<int64_t> SquareSize(Context& context, const YamlValue& v, const std::string& what) {
  if (v.kind == Kind::kInt) return v.integer;
  if (v.kind == Kind::kList && v.items.size() == 2 && v.items[0]->kind == Kind::kInt &&
      v.items[1]->kind == Kind::kInt && v.items[0]->integer == v.items[1]->integer) {
    return v.items[0]->integer;
  }
  if (v.kind == Kind::kList && v.items.size() == 1 && v.items[0]->kind == Kind::kInt) {
    return v.items[0]->integer;
  }
  context.Unsupported(v, what, "libkd's image_folder takes square sizes: n or [n, n]");
  return std::nullopt;
}

}  // namespace

// torchvision's transforms on such a dataset as the libkd dataset's kwargs.
absl::Status ImportTransforms(Context& context, const YamlValue& transform, const std::string& what,
                              const ImageDataset& dataset, DatasetConfig* out) {
  const std::string takes = absl::StrCat(
      "libkd's ", dataset.key,
      " takes torchvision's RandomCrop (with padding), RandomHorizontalFlip, ToTensor and "
      "Normalize");
  KD_ASSIGN_OR_RETURN(const std::vector<const YamlValue*> steps,
                      TransformSteps(context, transform, what));
  for (const YamlValue* step : steps) {
    const YamlValue* step_key = step->kind == Kind::kCall ? step->Find("key") : nullptr;
    const std::string name = step_key != nullptr ? step_key->text : step->Describe();
    const std::string short_name = name.substr(name.rfind('.') + 1);
    const YamlValue* init = step->Find("init");
    const YamlValue* kwargs =
        init != nullptr && init->kind == Kind::kMap ? init->Find("kwargs") : nullptr;
    KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(kwargs, absl::StrCat(what, " ", short_name)));
    const std::string at = absl::StrCat(what, " ", short_name);
    if (!absl::StartsWith(name, "torchvision.transforms.")) {
      context.Unsupported(*step, absl::StrCat(what, " ", name), takes);
      continue;
    }
    if (short_name == "ToTensor") {
      // libkd's images are floats in [0, 1], as ToTensor makes them
    } else if (short_name == "RandomHorizontalFlip") {
      KD_RETURN_IF_ERROR(ImportFlip(context, keys, *step, at, dataset.key, out));
    } else if (short_name == "RandomCrop") {
      const YamlValue* size = keys.Take("size");
      const int64_t n = dataset.size;
      const bool same_size =
          size != nullptr && ((size->kind == Kind::kInt && size->integer == n) ||
                              (size->kind == Kind::kList && size->items.size() == 2 &&
                               size->items[0]->integer == n && size->items[1]->integer == n));
      if (!same_size) {
        context.Unsupported(size != nullptr ? *size : *step, at + ".size",
                            absl::StrCat("libkd's ", dataset.key, " crops the ", n, "x", n,
                                         " image back to ", n, "x", n));
      }
      if (const YamlValue* v = keys.Take("padding")) {
        KD_ASSIGN_OR_RETURN(int64_t padding, Context::Int(*v, at + ".padding"));
        Kwarg* crop = out->add_kwargs();
        crop->set_name("random_crop_padding");
        crop->set_integer(padding);
      }
    } else if (short_name == "Normalize") {
      KD_RETURN_IF_ERROR(ImportNormalize(keys, *step, at, dataset.channels, out));
    } else {
      context.Unsupported(*step, at, takes);
      continue;
    }
    keys.Finish(context, absl::StrCat("libkd's ", dataset.key, " has no such setting"));
  }
  return absl::OkStatus();
}

// torchvision's transforms on an ImageFolder as the image_folder dataset's kwargs.
absl::Status ImportFolderTransforms(Context& context, const YamlValue& transform,
                                    const std::string& what, DatasetConfig* out) {
  const std::string takes =
      "libkd's image_folder takes torchvision's RandomResizedCrop, Resize, CenterCrop, "
      "RandomHorizontalFlip, ToTensor and Normalize";
  KD_ASSIGN_OR_RETURN(const std::vector<const YamlValue*> steps,
                      TransformSteps(context, transform, what));
  auto add_int = [&](const char* name, int64_t value) {
    Kwarg* kwarg = out->add_kwargs();
    kwarg->set_name(name);
    kwarg->set_integer(value);
  };
  auto add_numbers = [&](const char* name, const YamlValue& v, const std::string& at,
                         size_t count) -> absl::Status {
    if (v.kind != Kind::kList || v.items.size() != count) {
      return Context::WrongType(v, at, absl::StrCat(count, " numbers"));
    }
    Kwarg* kwarg = out->add_kwargs();
    kwarg->set_name(name);
    for (const auto& item : v.items) {
      KD_ASSIGN_OR_RETURN(double number, Context::Number(*item, at));
      kwarg->mutable_numbers()->add_values(number);
    }
    return absl::OkStatus();
  };
  bool resized = false;
  for (const YamlValue* step : steps) {
    const YamlValue* step_key = step->kind == Kind::kCall ? step->Find("key") : nullptr;
    const std::string name = step_key != nullptr ? step_key->text : step->Describe();
    const std::string short_name = name.substr(name.rfind('.') + 1);
    const YamlValue* init = step->Find("init");
    const YamlValue* kwargs =
        init != nullptr && init->kind == Kind::kMap ? init->Find("kwargs") : nullptr;
    const std::string at = absl::StrCat(what, " ", short_name);
    KD_ASSIGN_OR_RETURN(Keys keys, Keys::Of(kwargs, at));
    if (!absl::StartsWith(name, "torchvision.transforms.")) {
      context.Unsupported(*step, absl::StrCat(what, " ", name), takes);
      continue;
    }
    // Bilinear with antialias, as libkd resizes: the only interpolation it takes.
    auto check_interpolation = [&] {
      if (const YamlValue* v = keys.Take("interpolation");
          v != nullptr && v->kind != Kind::kNull &&
          !absl::StrContains(
              v->kind == Kind::kCall && v->Find("key") != nullptr ? v->Find("key")->text : v->text,
              "BILINEAR") &&
          !(v->kind == Kind::kInt && v->integer == 2)) {
        context.Unsupported(*v, at + ".interpolation",
                            "libkd resizes bilinearly, torchvision's "
                            "default");
      }
      if (const YamlValue* v = keys.Take("antialias");
          v != nullptr && v->kind == Kind::kBool && !v->boolean) {
        context.Unsupported(*v, at + ".antialias", "libkd resizes with antialias");
      }
      resized = true;
    };
    if (short_name == "ToTensor") {
      // floats in [0, 1], as ToTensor makes them
    } else if (short_name == "RandomHorizontalFlip") {
      KD_RETURN_IF_ERROR(ImportFlip(context, keys, *step, at, "image_folder", out));
    } else if (short_name == "RandomResizedCrop") {
      const YamlValue* size = keys.Take("size");
      if (size == nullptr) return Context::WrongType(*step, at + ".size", "given");
      if (std::optional<int64_t> n = SquareSize(context, *size, at + ".size")) {
        add_int("random_resized_crop", *n);
      }
      if (const YamlValue* v = keys.Take("scale")) {
        KD_RETURN_IF_ERROR(add_numbers("scale", *v, at + ".scale", 2));
      }
      if (const YamlValue* v = keys.Take("ratio")) {
        KD_RETURN_IF_ERROR(add_numbers("ratio", *v, at + ".ratio", 2));
      }
      check_interpolation();
    } else if (short_name == "Resize") {
      const YamlValue* size = keys.Take("size");
      if (size == nullptr || size->kind != Kind::kInt) {
        context.Unsupported(size != nullptr ? *size : *step, at + ".size",
                            "libkd's image_folder resizes the shorter side: an integer size");
      } else {
        add_int("resize", size->integer);
      }
      check_interpolation();
    } else if (short_name == "CenterCrop") {
      const YamlValue* size = keys.Take("size");
      if (size == nullptr) return Context::WrongType(*step, at + ".size", "given");
      if (std::optional<int64_t> n = SquareSize(context, *size, at + ".size")) {
        add_int("center_crop", *n);
      }
    } else if (short_name == "Normalize") {
      KD_RETURN_IF_ERROR(ImportNormalize(keys, *step, at, 3, out));
    } else {
      context.Unsupported(*step, at, takes);
      continue;
    }
    keys.Finish(context, "libkd's image_folder has no such setting");
  }
  if (resized) {
    context.Note(transform, what,
                 "libkd resizes on torchvision's tensor path (antialiased bilinear on the decoded "
                 "uint8 image, torch's kernel); torchvision's ImageFolder hands PIL images to the "
                 "transforms, and PIL's resize rounds differently (pixels within a few levels)");
  }
  return absl::OkStatus();
}

}  // namespace torchdistill
}  // namespace kd
