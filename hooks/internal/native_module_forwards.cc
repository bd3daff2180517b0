// How native sub-models (Model::Submodel of a native model) run one module on its own: the
// registry of forwards by module type (native_model.h), torch::nn's common layers in it,
// Sequential containers, and modules kept in a Sequential.
#include "hooks/internal/native_module_forwards.h"

#include <map>
#include <mutex>
#include <optional>
#include <typeindex>
#include <utility>

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/adaptive.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/modules/pooling.h>

#include "hooks/hook_point.h"
#include "hooks/native_model.h"

namespace kd {
namespace hooks_internal {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::type_index, NativeModuleForwardFn> forwards;
};

template <typename... Impl>
void AddDeduced(Registry& registry) {
  (registry.forwards.emplace(
       std::type_index(typeid(Impl)),
       [](torch::nn::Module& module, std::vector<c10::IValue>& args, const Kwargs& kwargs) {
         return CallDeduced(static_cast<Impl&>(module), args, kwargs);
       }),
   ...);
}

Registry& Forwards() {
  static Registry* registry = [] {
    auto* r = new Registry;
    using namespace torch::nn;  // NOLINT: the layer list reads as torch::nn's
    AddDeduced<LinearImpl, BilinearImpl, IdentityImpl, FlattenImpl, UnflattenImpl, Conv1dImpl,
               Conv2dImpl, Conv3dImpl, BatchNorm1dImpl, BatchNorm2dImpl, BatchNorm3dImpl,
               LayerNormImpl, GroupNormImpl, EmbeddingImpl, ReLUImpl, ReLU6Impl, LeakyReLUImpl,
               GELUImpl, SiLUImpl, SigmoidImpl, TanhImpl, ELUImpl, MishImpl, SoftmaxImpl,
               LogSoftmaxImpl, MaxPool1dImpl, MaxPool2dImpl, MaxPool3dImpl, AvgPool1dImpl,
               AvgPool2dImpl, AvgPool3dImpl, AdaptiveAvgPool1dImpl, AdaptiveAvgPool2dImpl,
               AdaptiveAvgPool3dImpl, AdaptiveMaxPool1dImpl, AdaptiveMaxPool2dImpl,
               AdaptiveMaxPool3dImpl, DropoutImpl, Dropout2dImpl, Dropout3dImpl>(*r);
    return r;
  }();
  return *registry;
}

// One tensor in, as Sequential's forward takes it.
const at::Tensor& OneTensor(const torch::nn::Module& module, const std::vector<c10::IValue>& args,
                            const Kwargs& kwargs) {
  TORCH_CHECK(args.size() == 1 && args[0].isTensor() && kwargs.empty(), NativeTypeName(module),
              " runs on its own with one tensor argument, got ", args.size(), " argument(s)",
              kwargs.empty() ? "" : " and keyword arguments");
  return args[0].toTensor();
}

// The forward of a Sequential (or a subclass with its own templated forward) on one tensor.
template <typename SequentialT>
NativeForwardFn SequentialForward(SequentialT* sequential) {
  return [sequential](std::vector<c10::IValue>& args, const Kwargs& kwargs) {
    return c10::IValue(sequential->forward(OneTensor(*sequential, args, kwargs)));
  };
}

}  // namespace

std::optional<NativeForwardFn> ModuleForward(const std::shared_ptr<torch::nn::Module>& module,
                                             const torch::nn::Module* parent) {
  torch::nn::Module* raw = module.get();
  {
    Registry& registry = Forwards();
    std::lock_guard<std::mutex> lock(registry.mutex);
    if (auto it = registry.forwards.find(std::type_index(typeid(*raw)));
        it != registry.forwards.end()) {
      return [raw, fn = it->second](std::vector<c10::IValue>& args, const Kwargs& kwargs) {
        return fn(*raw, args, kwargs);
      };
    }
  }
  // Sequential's forward is not virtual: a HookedSequential (its children through hook points)
  // is called as one.
  if (auto* hooked = dynamic_cast<HookedSequentialImpl*>(raw)) return SequentialForward(hooked);
  if (auto* sequential = dynamic_cast<torch::nn::SequentialImpl*>(raw)) {
    return SequentialForward(sequential);
  }
  // A module kept in a Sequential: its AnyModule knows how to call it.
  if (const auto* holder = dynamic_cast<const torch::nn::SequentialImpl*>(parent)) {
    for (const torch::nn::AnyModule& any : *holder) {
      if (any.ptr().get() != raw) continue;
      return [raw, any = torch::nn::AnyModule(any)](std::vector<c10::IValue>& args,
                                                    const Kwargs& kwargs) mutable {
        c10::IValue out =
            hooks_internal::AnyToIValue(any.any_forward(OneTensor(*raw, args, kwargs)));
        TORCH_CHECK(out.isTensor(), NativeTypeName(*raw),
                    " returned a value other than a tensor, which a sub-model cannot hand on");
        return out;
      };
    }
  }
  return std::nullopt;
}

}  // namespace hooks_internal

void RegisterNativeModuleForward(std::type_index type, NativeModuleForwardFn forward) {
  hooks_internal::Registry& registry = hooks_internal::Forwards();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.forwards.insert_or_assign(type, std::move(forward));
}

}  // namespace kd
