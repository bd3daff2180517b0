#include "distill/boxes/memory_roots.h"

#include <functional>

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>

#include "absl/strings/str_cat.h"

namespace kd {
namespace {

// Every tensor in `value` (nested lists, tuples and dicts), with `path` extended by indices.
void VisitValue(const std::string& path, const c10::IValue& value, const TensorVisitor& visit) {
  if (value.isTensor()) {
    visit(path, value.toTensor());
  } else if (value.isList()) {
    const c10::List<c10::IValue> list = value.toList();
    for (size_t i = 0; i < list.size(); ++i)
      VisitValue(absl::StrCat(path, "[", i, "]"), list.get(i), visit);
  } else if (value.isTuple()) {
    const auto& elements = value.toTupleRef().elements();
    for (size_t i = 0; i < elements.size(); ++i) {
      VisitValue(absl::StrCat(path, "[", i, "]"), elements[i], visit);
    }
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) {
      const std::string key =
          entry.key().isString() ? entry.key().toStringRef() : entry.key().tagKind();
      VisitValue(absl::StrCat(path, "[", key, "]"), entry.value(), visit);
    }
  }
}

}  // namespace

void AddModelRoots(MemoryRoots& roots, const std::string& name, const Model& model) {
  roots.Add(name, [name, &model](const TensorVisitor& visit) {
    for (const auto& [path, p] : model.NamedParameters()) {
      const std::string full = absl::StrCat(name, ".", path);
      visit(full, p);
      if (p.grad().defined()) visit(absl::StrCat(full, ".grad"), p.grad());
    }
    for (const auto& [path, b] : model.NamedBuffers()) visit(absl::StrCat(name, ".", path), b);
  });
}

void AddOptimizerRoots(MemoryRoots& roots, const std::string& name,
                       const torch::optim::Optimizer& optimizer) {
  roots.Add(name, [name, &optimizer](const TensorVisitor& visit) {
    int64_t index = 0;
    for (const auto& group : optimizer.param_groups()) {
      for (const at::Tensor& p : group.params()) {
        auto it = optimizer.state().find(p.unsafeGetTensorImpl());
        if (it != optimizer.state().end()) {
          const std::string at = absl::StrCat(name, ".state[", index, "].");
          const torch::optim::OptimizerParamState* state = it->second.get();
          if (auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(state)) {
            visit(at + "momentum_buffer", sgd->momentum_buffer());
          } else if (auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(state)) {
            visit(at + "exp_avg", adam->exp_avg());
            visit(at + "exp_avg_sq", adam->exp_avg_sq());
            visit(at + "max_exp_avg_sq", adam->max_exp_avg_sq());
          } else if (auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(state)) {
            visit(at + "exp_avg", adamw->exp_avg());
            visit(at + "exp_avg_sq", adamw->exp_avg_sq());
            visit(at + "max_exp_avg_sq", adamw->max_exp_avg_sq());
          }
        }
        ++index;
      }
    }
  });
}

void AddIoDictRoots(MemoryRoots& roots, const std::string& name, const IoDict* io) {
  roots.Add(name, [name, io](const TensorVisitor& visit) {
    for (const auto& [path, entry] : *io) {
      for (const auto& [io_type, value] : entry) {
        VisitValue(absl::StrCat(name, "[", path, "].", io_type), value, visit);
      }
    }
  });
}

}  // namespace kd
