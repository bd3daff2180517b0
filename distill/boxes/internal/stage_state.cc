// What a checkpoint keeps of a stage (optimizer and scheduler state, the gradient count, the
// losses' and auxiliary modules' tensors, the AMP scaler) and loading it back, checked first.
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <torch/serialize/archive.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "distill/boxes/internal/stage_impl.h"
#include "distill/boxes/io_util.h"
#include "memdiag/tracking_allocator.h"

namespace kd {
namespace boxes_internal {

void Stage::SaveTo(c10::impl::GenericDict& dict) const {
  torch::serialize::OutputArchive archive;
  optimizer_->save(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  dict.insert("optimizer", BytesTensor(bytes.str()));
  dict.insert("optimizer_kind", OptimizerKind(*optimizer_));
  dict.insert("optimizer_groups", c10::List<int64_t>(ParamGroupSizes(*optimizer_)));
  c10::List<double> scheduler;
  if (scheduler_ != nullptr) {
    for (double v : scheduler_->State()) scheduler.push_back(v);
  }
  dict.insert("scheduler", scheduler);
  dict.insert("grad_count", grad_count_);
  c10::impl::GenericDict loss_state(c10::StringType::get(), c10::TensorType::get());
  for (const auto& [name, tensor] : criterion_->NamedState()) {
    loss_state.insert(name, tensor.detach().cpu());
  }
  dict.insert("loss_state", loss_state);
  if (scaler_ != nullptr) dict.insert("grad_scaler", c10::List<double>(scaler_->State()));
  c10::impl::GenericDict aux(c10::StringType::get(), c10::TensorType::get());
  for (const auto& [name, tensor] : AuxTensors(aux_)) aux.insert(name, tensor.detach().cpu());
  dict.insert("auxiliary_modules", aux);
}

absl::Status Stage::LoadFrom(const c10::impl::GenericDict& dict) {
  // The optimizer's kind and layout first: libtorch's own load of another optimizer's state
  // stops on an internal assert ("report a bug to PyTorch"). Checkpoints written before these
  // keys existed skip the check.
  if (dict.contains("optimizer_kind")) {
    const std::string saved = dict.at("optimizer_kind").toStringRef();
    if (saved != OptimizerKind(*optimizer_)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the checkpoint's optimizer is ", saved, ", the config's ", OptimizerKind(*optimizer_),
          ": resume with the optimizer it was saved with, or start a fresh run (--overwrite)"));
    }
  }
  if (dict.contains("optimizer_groups")) {
    const std::vector<int64_t> saved = dict.at("optimizer_groups").toIntVector();
    const std::vector<int64_t> mine = ParamGroupSizes(*optimizer_);
    if (saved != mine) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the checkpoint's optimizer has parameter groups of ", absl::StrJoin(saved, ", "),
          " parameters, the config's ", absl::StrJoin(mine, ", "),
          " (param_groups, frozen modules or the model changed since): resume with the config "
          "it was saved with, or start a fresh run (--overwrite)"));
    }
  }
  std::istringstream bytes(TensorBytes(dict.at("optimizer").toTensor()));
  torch::serialize::InputArchive archive;
  if (absl::Status loaded = CallTorch([&] {
        archive.load_from(bytes);
        optimizer_->load(archive);
      });
      !loaded.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the checkpoint's optimizer state cannot be read (",
                     loaded.message().substr(0, loaded.message().find('\n')),
                     "): the checkpoint is damaged; resume from another, or start a fresh run"));
  }
  if (scheduler_ != nullptr) scheduler_->LoadState(dict.at("scheduler").toDoubleVector());
  grad_count_ = dict.at("grad_count").toInt();
  if (dict.contains("auxiliary_modules")) {
    const c10::impl::GenericDict saved = dict.at("auxiliary_modules").toGenericDict();
    at::NoGradGuard no_grad;
    for (auto& [name, tensor] : AuxTensors(aux_)) {
      auto it = saved.find(name);
      if (it == saved.end()) {
        return absl::InvalidArgumentError(absl::StrCat("the checkpoint has no \"", name,
                                                       "\" (auxiliary modules changed since?)"));
      }
      tensor.copy_(it->value().toTensor());
    }
  }
  if (scaler_ != nullptr && dict.contains("grad_scaler")) {
    scaler_->LoadState(dict.at("grad_scaler").toDoubleVector());
  }
  const c10::impl::GenericDict loss_state = dict.at("loss_state").toGenericDict();
  at::NoGradGuard no_grad;
  for (const auto& [name, tensor] : criterion_->NamedState()) {
    auto it = loss_state.find(name);
    if (it != loss_state.end()) {
      at::Tensor target = tensor;
      target.copy_(it->value().toTensor());
    }
  }
  return absl::OkStatus();
}

}  // namespace boxes_internal
}  // namespace kd
