// Registered "inception_v3" as torchvision defines it (torchvision/models/inception.py): the
// Conv2d_1a_3x3 ... Mixed_7c modules with their branch names (Mixed_5b.branch5x5_2.conv,
// Mixed_7b.branch3x3_2a.bn), AuxLogits, fc, so torchvision's state dicts load by name. As
// torchvision's: in training mode with aux_logits the output is the tuple (logits, aux_logits)
// (torchvision's InceptionOutputs), else the logits; transform_input re-normalizes ImageNet-
// normalized input to [-1, 1] as the original weights expect. Weights start as torchvision's:
// truncated normal convolutions and linear layers (std 0.1; AuxLogits.conv1 0.01, AuxLogits.fc
// 0.001; cut at +-2), batch norms 1 and 0 (eps 0.001).
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "distill/models/internal/kwargs_util.h"
#include "distill/models/internal/torchvision_layers.h"
#include "distill/models/model_registry.h"
#include "hooks/hook_point.h"
#include "hooks/native_model.h"

namespace kd {
namespace {

namespace nn = torch::nn;

// torch.nn.init.trunc_normal_(t, 0, std, a=-2, b=2), by torch's method (inverse CDF of a
// uniform draw between the bounds' CDFs).
void TruncNormal(at::Tensor t, double std) {
  at::NoGradGuard no_grad;
  const auto cdf = [](double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; };
  const double lo = cdf(-2.0 / std), hi = cdf(2.0 / std);
  t.uniform_(2 * lo - 1, 2 * hi - 1).erfinv_().mul_(std * std::sqrt(2.0)).clamp_(-2.0, 2.0);
}

struct Kernel {
  int64_t h, w;
};

// torchvision's BasicConv2d: relu(bn(conv(x))), a bias-free convolution and a batch norm with
// eps 0.001 (the ReLU is functional, as torchvision's).
struct BasicConv2dImpl : nn::Module {
  BasicConv2dImpl(int64_t in, int64_t out, Kernel kernel, int64_t stride = 1,
                  Kernel padding = {0, 0}, double stddev = 0.1)
      : conv(register_module("conv", nn::Conv2d(nn::Conv2dOptions(in, out, {kernel.h, kernel.w})
                                                    .stride(stride)
                                                    .padding({padding.h, padding.w})
                                                    .bias(false)))),
        bn(register_module("bn", nn::BatchNorm2d(nn::BatchNorm2dOptions(out).eps(0.001)))) {
    TruncNormal(conv->weight, stddev);
  }

  at::Tensor forward(at::Tensor x) { return at::relu(Call(bn, Call(conv, x))); }

  nn::Conv2d conv;
  nn::BatchNorm2d bn;
};
TORCH_MODULE(BasicConv2d);

BasicConv2d Square(int64_t in, int64_t out, int64_t k, int64_t stride = 1, int64_t pad = 0) {
  return BasicConv2d(in, out, Kernel{k, k}, stride, Kernel{pad, pad});
}

at::Tensor AvgPool3x3(const at::Tensor& x) { return at::avg_pool2d(x, {3, 3}, {1, 1}, {1, 1}); }
at::Tensor MaxPool3x3Stride2(const at::Tensor& x) { return at::max_pool2d(x, {3, 3}, {2, 2}); }

// A module of named BasicConv2d branches, registered in torchvision's order.
struct InceptionBlock : nn::Module {
  BasicConv2d& Add(const std::string& name, BasicConv2d conv) {
    return convs.emplace_back(register_module(name, std::move(conv)));
  }
  at::Tensor Run(size_t i, const at::Tensor& x) { return Call(convs[i], x); }
  std::vector<BasicConv2d> convs;
};

struct InceptionAImpl : InceptionBlock {
  InceptionAImpl(int64_t in, int64_t pool_features) {
    Add("branch1x1", Square(in, 64, 1));
    Add("branch5x5_1", Square(in, 48, 1));
    Add("branch5x5_2", Square(48, 64, 5, 1, 2));
    Add("branch3x3dbl_1", Square(in, 64, 1));
    Add("branch3x3dbl_2", Square(64, 96, 3, 1, 1));
    Add("branch3x3dbl_3", Square(96, 96, 3, 1, 1));
    Add("branch_pool", Square(in, pool_features, 1));
  }
  at::Tensor forward(at::Tensor x) {
    return at::cat({Run(0, x), Run(2, Run(1, x)), Run(5, Run(4, Run(3, x))), Run(6, AvgPool3x3(x))},
                   1);
  }
};
TORCH_MODULE(InceptionA);

struct InceptionBImpl : InceptionBlock {
  explicit InceptionBImpl(int64_t in) {
    Add("branch3x3", Square(in, 384, 3, 2));
    Add("branch3x3dbl_1", Square(in, 64, 1));
    Add("branch3x3dbl_2", Square(64, 96, 3, 1, 1));
    Add("branch3x3dbl_3", Square(96, 96, 3, 2));
  }
  at::Tensor forward(at::Tensor x) {
    return at::cat({Run(0, x), Run(3, Run(2, Run(1, x))), MaxPool3x3Stride2(x)}, 1);
  }
};
TORCH_MODULE(InceptionB);

struct InceptionCImpl : InceptionBlock {
  InceptionCImpl(int64_t in, int64_t c7) {
    const Kernel k1x7{1, 7}, k7x1{7, 1}, p1x7{0, 3}, p7x1{3, 0};
    Add("branch1x1", Square(in, 192, 1));
    Add("branch7x7_1", Square(in, c7, 1));
    Add("branch7x7_2", BasicConv2d(c7, c7, k1x7, 1, p1x7));
    Add("branch7x7_3", BasicConv2d(c7, 192, k7x1, 1, p7x1));
    Add("branch7x7dbl_1", Square(in, c7, 1));
    Add("branch7x7dbl_2", BasicConv2d(c7, c7, k7x1, 1, p7x1));
    Add("branch7x7dbl_3", BasicConv2d(c7, c7, k1x7, 1, p1x7));
    Add("branch7x7dbl_4", BasicConv2d(c7, c7, k7x1, 1, p7x1));
    Add("branch7x7dbl_5", BasicConv2d(c7, 192, k1x7, 1, p1x7));
    Add("branch_pool", Square(in, 192, 1));
  }
  at::Tensor forward(at::Tensor x) {
    at::Tensor dbl = x;
    for (size_t i = 4; i <= 8; ++i) dbl = Run(i, dbl);
    return at::cat({Run(0, x), Run(3, Run(2, Run(1, x))), dbl, Run(9, AvgPool3x3(x))}, 1);
  }
};
TORCH_MODULE(InceptionC);

struct InceptionDImpl : InceptionBlock {
  explicit InceptionDImpl(int64_t in) {
    Add("branch3x3_1", Square(in, 192, 1));
    Add("branch3x3_2", Square(192, 320, 3, 2));
    Add("branch7x7x3_1", Square(in, 192, 1));
    Add("branch7x7x3_2", BasicConv2d(192, 192, Kernel{1, 7}, 1, Kernel{0, 3}));
    Add("branch7x7x3_3", BasicConv2d(192, 192, Kernel{7, 1}, 1, Kernel{3, 0}));
    Add("branch7x7x3_4", Square(192, 192, 3, 2));
  }
  at::Tensor forward(at::Tensor x) {
    return at::cat({Run(1, Run(0, x)), Run(5, Run(4, Run(3, Run(2, x)))), MaxPool3x3Stride2(x)}, 1);
  }
};
TORCH_MODULE(InceptionD);

struct InceptionEImpl : InceptionBlock {
  explicit InceptionEImpl(int64_t in) {
    const Kernel k1x3{1, 3}, k3x1{3, 1}, p1x3{0, 1}, p3x1{1, 0};
    Add("branch1x1", Square(in, 320, 1));
    Add("branch3x3_1", Square(in, 384, 1));
    Add("branch3x3_2a", BasicConv2d(384, 384, k1x3, 1, p1x3));
    Add("branch3x3_2b", BasicConv2d(384, 384, k3x1, 1, p3x1));
    Add("branch3x3dbl_1", Square(in, 448, 1));
    Add("branch3x3dbl_2", Square(448, 384, 3, 1, 1));
    Add("branch3x3dbl_3a", BasicConv2d(384, 384, k1x3, 1, p1x3));
    Add("branch3x3dbl_3b", BasicConv2d(384, 384, k3x1, 1, p3x1));
    Add("branch_pool", Square(in, 192, 1));
  }
  at::Tensor forward(at::Tensor x) {
    const at::Tensor b3 = Run(1, x);
    const at::Tensor dbl = Run(5, Run(4, x));
    return at::cat({Run(0, x), at::cat({Run(2, b3), Run(3, b3)}, 1),
                    at::cat({Run(6, dbl), Run(7, dbl)}, 1), Run(8, AvgPool3x3(x))},
                   1);
  }
};
TORCH_MODULE(InceptionE);

struct InceptionAuxImpl : nn::Module {
  InceptionAuxImpl(int64_t in, int64_t num_classes)
      : conv0(register_module("conv0", Square(in, 128, 1))),
        conv1(register_module("conv1", BasicConv2d(128, 768, Kernel{5, 5}, 1, Kernel{0, 0}, 0.01))),
        fc(register_module("fc", nn::Linear(768, num_classes))) {
    TruncNormal(fc->weight, 0.001);
  }
  at::Tensor forward(at::Tensor x) {
    x = Call(conv1, Call(conv0, at::avg_pool2d(x, {5, 5}, {3, 3})));
    return Call(fc, at::flatten(at::adaptive_avg_pool2d(x, {1, 1}), 1));
  }
  BasicConv2d conv0, conv1;
  nn::Linear fc;
};
TORCH_MODULE(InceptionAux);

struct Inception3Impl : nn::Module {
  Inception3Impl(int64_t num_classes, bool aux_logits, bool transform_input, double dropout_p)
      : transform_input(transform_input) {
    stem.push_back(register_module("Conv2d_1a_3x3", Square(3, 32, 3, 2)));
    stem.push_back(register_module("Conv2d_2a_3x3", Square(32, 32, 3)));
    stem.push_back(register_module("Conv2d_2b_3x3", Square(32, 64, 3, 1, 1)));
    maxpool1 = register_module("maxpool1", nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2)));
    stem2.push_back(register_module("Conv2d_3b_1x1", Square(64, 80, 1)));
    stem2.push_back(register_module("Conv2d_4a_3x3", Square(80, 192, 3)));
    maxpool2 = register_module("maxpool2", nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2)));
    mixed_5 = {register_module("Mixed_5b", InceptionA(192, 32)),
               register_module("Mixed_5c", InceptionA(256, 64)),
               register_module("Mixed_5d", InceptionA(288, 64))};
    mixed_6a = register_module("Mixed_6a", InceptionB(288));
    mixed_6 = {register_module("Mixed_6b", InceptionC(768, 128)),
               register_module("Mixed_6c", InceptionC(768, 160)),
               register_module("Mixed_6d", InceptionC(768, 160)),
               register_module("Mixed_6e", InceptionC(768, 192))};
    if (aux_logits) aux = register_module("AuxLogits", InceptionAux(768, num_classes));
    mixed_7a = register_module("Mixed_7a", InceptionD(768));
    mixed_7 = {register_module("Mixed_7b", InceptionE(1280)),
               register_module("Mixed_7c", InceptionE(2048))};
    avgpool = register_module("avgpool", nn::AdaptiveAvgPool2d(1));
    dropout = register_module("dropout", nn::Dropout(dropout_p));
    fc = register_module("fc", nn::Linear(2048, num_classes));
    TruncNormal(fc->weight, 0.1);
  }

  c10::IValue forward(at::Tensor x) {
    if (transform_input) {
      x = at::cat({x.slice(1, 0, 1) * (0.229 / 0.5) + (0.485 - 0.5) / 0.5,
                   x.slice(1, 1, 2) * (0.224 / 0.5) + (0.456 - 0.5) / 0.5,
                   x.slice(1, 2, 3) * (0.225 / 0.5) + (0.406 - 0.5) / 0.5},
                  1);
    }
    for (BasicConv2d& conv : stem) x = Call(conv, x);
    x = Call(maxpool1, x);
    for (BasicConv2d& conv : stem2) x = Call(conv, x);
    x = Call(maxpool2, x);
    for (InceptionA& block : mixed_5) x = Call(block, x);
    x = Call(mixed_6a, x);
    for (InceptionC& block : mixed_6) x = Call(block, x);
    at::Tensor aux_out;
    if (aux && is_training()) aux_out = Call(aux, x);
    x = Call(mixed_7a, x);
    for (InceptionE& block : mixed_7) x = Call(block, x);
    x = Call(fc, at::flatten(Call(dropout, Call(avgpool, x)), 1));
    if (aux_out.defined()) return c10::ivalue::Tuple::create({x, aux_out});
    return x;
  }

  // Calls add(name, module holder) for each child in torchvision's order.
  template <typename F>
  void ForEachChild(F&& add) {
    add("Conv2d_1a_3x3", stem[0]);
    add("Conv2d_2a_3x3", stem[1]);
    add("Conv2d_2b_3x3", stem[2]);
    add("maxpool1", maxpool1);
    add("Conv2d_3b_1x1", stem2[0]);
    add("Conv2d_4a_3x3", stem2[1]);
    add("maxpool2", maxpool2);
    for (size_t i = 0; i < mixed_5.size(); ++i)
      add(absl::StrCat("Mixed_5", std::string(1, "bcd"[i])), mixed_5[i]);
    add("Mixed_6a", mixed_6a);
    for (size_t i = 0; i < mixed_6.size(); ++i)
      add(absl::StrCat("Mixed_6", std::string(1, "bcde"[i])), mixed_6[i]);
    if (aux) add("AuxLogits", aux);
    add("Mixed_7a", mixed_7a);
    for (size_t i = 0; i < mixed_7.size(); ++i)
      add(absl::StrCat("Mixed_7", std::string(1, "bc"[i])), mixed_7[i]);
    add("avgpool", avgpool);
    add("dropout", dropout);
    add("fc", fc);
  }

  bool transform_input;
  std::vector<BasicConv2d> stem, stem2;
  nn::MaxPool2d maxpool1{nullptr}, maxpool2{nullptr};
  std::vector<InceptionA> mixed_5;
  InceptionB mixed_6a{nullptr};
  std::vector<InceptionC> mixed_6;
  InceptionAux aux{nullptr};
  InceptionD mixed_7a{nullptr};
  std::vector<InceptionE> mixed_7;
  nn::AdaptiveAvgPool2d avgpool{nullptr};
  nn::Dropout dropout{nullptr};
  nn::Linear fc{nullptr};
};
TORCH_MODULE(Inception3);

// Each block runs on its own (a torchdistill `sequential` of inception_v3's children).
const bool kBlocksRunAlone = [] {
  RegisterNativeModuleForward<BasicConv2dImpl>();
  RegisterNativeModuleForward<InceptionAImpl>();
  RegisterNativeModuleForward<InceptionBImpl>();
  RegisterNativeModuleForward<InceptionCImpl>();
  RegisterNativeModuleForward<InceptionDImpl>();
  RegisterNativeModuleForward<InceptionEImpl>();
  RegisterNativeModuleForward<InceptionAuxImpl>();
  return true;
}();

absl::StatusOr<std::unique_ptr<Model>> MakeInceptionV3(const Kwargs& kwargs) {
  if (!BoolKwarg(kwargs, "init_weights")) {
    return absl::InvalidArgumentError(
        "inception_v3: init_weights false (torch's default init) is not available; drop the "
        "kwarg for torchvision's truncated-normal init, or load weights with src_ckpt");
  }
  return MakeNativeModel(
      Inception3(IntKwarg(kwargs, "num_classes"), BoolKwarg(kwargs, "aux_logits"),
                 BoolKwarg(kwargs, "transform_input"), NumberKwarg(kwargs, "dropout"))
          .ptr());
}

std::vector<KwargSpec> InceptionSpecs() {
  return {models_internal::ImageNetClassesSpec(),
          {.name = "aux_logits",
           .type = KwargType::kBool,
           .doc = "the auxiliary classifier on Mixed_6e; in training the output is then the tuple "
                  "(logits, aux_logits)",
           .default_value = true},
          {.name = "transform_input",
           .type = KwargType::kBool,
           .doc = "map ImageNet-normalized input to the [-1, 1] scaling the original weights "
                  "expect (torchvision sets it with weights)",
           .default_value = false},
          {.name = "init_weights",
           .type = KwargType::kBool,
           .doc = "torchvision's truncated-normal init (the only init libkd has: false is refused)",
           .default_value = true},
          models_internal::DropoutSpec("before fc", 0.5)};
}

KD_REGISTER(ModelRegistry(), "inception_v3", MakeInceptionV3, InceptionSpecs());

// HND/GHND's custom_inception_v3 (torchdistill's models/custom/bottleneck/classification/
// inception.py, sc2-benchmark's since): the bottleneck in place of Conv2d_1a_3x3 ... maxpool2, then
// inception_v3's children named in short_module_names in its order (a max pooling inserted where
// torchdistill inserts one), and before fc global average pooling, dropout (0.5) and a flatten.
// torchdistill's names: bottleneck, Mixed_5b, ..., adaptive_avgpool, dropout, flatten, fc;
// sc2-benchmark's: bottleneck_layer, inception_modules.Mixed_5b, ..., avgpool, dropout, fc.
absl::StatusOr<std::unique_ptr<Model>> MakeCustomInceptionV3(const Kwargs& kwargs) {
  const std::vector<std::string> short_names = StringListKwarg(kwargs, "short_module_names");
  const bool with_aux = models_internal::Contains(short_names, "AuxLogits");
  Inception3 org(IntKwarg(kwargs, "num_classes"), with_aux, /*transform_input=*/false, 0.5);
  std::vector<std::string> children;
  org->ForEachChild([&](const std::string& name, const auto&) { children.push_back(name); });
  if (!with_aux) children.push_back("AuxLogits");
  KD_ASSIGN_OR_RETURN(models_internal::HndOptions options,
                      models_internal::ReadHndOptions(kwargs, "short_module_names", children));
  const bool sc2bench = options.naming == models_internal::HndNaming::kSc2bench;
  models_internal::Chain root, modules;
  models_internal::Chain& body = sc2bench ? modules : root;
  root->Append(sc2bench ? "bottleneck_layer" : "bottleneck",
               models_internal::HndBottleneck(models_internal::HndHead::kInception3,
                                              options.bottleneck_channel, options.bottleneck_idx));
  const auto max_pool = [] { return nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2)); };
  std::string last;
  bool fc = false;
  org->ForEachChild([&](const std::string& name, const auto& module) {
    if (!models_internal::Contains(options.short_names, name)) return;
    if (name == "fc") {  // after the body, below
      fc = true;
      return;
    }
    if (last == "Conv2d_2b_3x3" && name == "Conv2d_3b_1x1") body->Append("maxpool1", max_pool());
    if (last == "Conv2d_4a_3x3" && name == "Mixed_5b") body->Append("maxpool2", max_pool());
    body->Append(name, module);
    last = name;
  });
  if (sc2bench) root->Append("inception_modules", modules);
  if (fc) {
    root->Append(sc2bench ? "avgpool" : "adaptive_avgpool", nn::AdaptiveAvgPool2d(1));
    root->Append("dropout", nn::Dropout(0.5));
    if (sc2bench) {
      root->AppendFunction([](at::Tensor x) { return at::flatten(x, 1); });
    } else {
      root->Append("flatten", nn::Flatten());
    }
    root->Append("fc", org->fc);
  }
  return MakeNativeModel(root.ptr());
}

std::vector<KwargSpec> CustomInceptionSpecs() {
  std::vector<KwargSpec> specs = models_internal::HndSpecs(
      models_internal::HndHead::kInception3, "short_module_names",
      {"Mixed_5b", "Mixed_5c", "Mixed_5d", "Mixed_6a", "Mixed_6b", "Mixed_6c", "Mixed_6d",
       "Mixed_6e", "Mixed_7a", "Mixed_7b", "Mixed_7c", "fc"});
  specs.insert(specs.begin(), InceptionSpecs()[0]);  // num_classes
  return specs;
}
KD_REGISTER(ModelRegistry(), "custom_inception_v3", MakeCustomInceptionV3, CustomInceptionSpecs());

}  // namespace
}  // namespace kd
