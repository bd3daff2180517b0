// The pretrained weight files torchdistill's configs name (torchvision's *_Weights, legacy
// pretrained: True, torchdistill's CIFAR checkpoints) as the files torch.hub keeps.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "distill/torchdistill/import_context.h"

namespace kd {
namespace torchdistill {
namespace {

using Kind = YamlValue::Kind;

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

}  // namespace

std::string WeightsOrigin(const std::string& model) {
  for (const auto& [custom, original] : kCustomModelOrigins) {
    if (model == custom) return original;
  }
  return model;
}

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
    *why =
        "torchvision's weights are an !import_get of a *_Weights member, a !getattr of one "
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

}  // namespace torchdistill
}  // namespace kd
