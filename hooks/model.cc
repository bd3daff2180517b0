#include "hooks/model.h"

#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <ATen/core/Dict.h>
#include <c10/core/GradMode.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file_util.h"
#include "base/nearest.h"
#include "base/status_macros.h"
#include "base/torch_file.h"
#include "base/torch_status.h"

namespace kd {
namespace {

std::string JoinSome(const std::vector<std::string>& names, size_t most = 5) {
  std::vector<std::string> shown(names.begin(), names.begin() + std::min(most, names.size()));
  std::string out = absl::StrJoin(shown, ", ");
  if (names.size() > most) absl::StrAppend(&out, ", ... (", names.size(), " in all)");
  return out;
}

}  // namespace

absl::Status Model::CheckModulePath(absl::string_view path) const {
  std::vector<std::string> paths;
  for (const ModuleInfo& m : NamedModules()) {
    if (m.path == path) return absl::OkStatus();
    paths.push_back(m.path);
  }
  return absl::NotFoundError(absl::StrCat("no module ", QuoteName(path), " in this ", kind(),
                                          " model; ", Suggest(path, paths)));
}

absl::StatusOr<std::unique_ptr<Model>> Model::Submodel(absl::string_view path) const {
  KD_RETURN_IF_ERROR(CheckModulePath(path));
  return absl::UnimplementedError(
      absl::StrCat("a ", kind(), " model cannot run its module ", QuoteName(path), " on its own"));
}

int64_t Model::NumParameters() const {
  int64_t total = 0;
  for (const auto& [name, tensor] : NamedParameters()) total += tensor.numel();
  return total;
}

absl::StatusOr<c10::IValue> Model::ForwardTruncated(std::vector<c10::IValue> args,
                                                    const Kwargs& kwargs,
                                                    const std::vector<std::string>& stop_after) {
  return absl::UnimplementedError(
      absl::StrCat("a ", kind(), " model cannot stop its forward early; run Forward instead"));
}

void Model::To(c10::Device device, std::optional<c10::ScalarType> dtype) {
  c10::NoGradGuard no_grad;
  std::vector<NamedTensor> tensors = NamedParameters();
  for (NamedTensor& buffer : NamedBuffers()) tensors.push_back(std::move(buffer));
  for (auto& [name, t] : tensors) {
    const c10::ScalarType target = dtype && t.is_floating_point() ? *dtype : t.scalar_type();
    if (t.device() != device || t.scalar_type() != target) t.set_data(t.to(device, target));
  }
}

absl::Status Model::SaveState(const std::string& path) const {
  c10::Dict<std::string, at::Tensor> state;
  for (const auto& [name, tensor] : NamedParameters()) state.insert(name, tensor.detach());
  for (const auto& [name, tensor] : NamedBuffers()) state.insert(name, tensor.detach());
  return WriteTorchFile(path, c10::IValue(state));
}

absl::Status Model::LoadState(const std::string& path, const LoadStateOptions& options) {
  KD_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  absl::StatusOr<c10::IValue> loaded = DecodeTorchSave(bytes);
  if (!loaded.ok()) {
    return WithContext(path, loaded.status());
  }
  if (!loaded->isGenericDict()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": holds a ", loaded->tagKind(),
                                                   ", not a dict of parameter path -> tensor"));
  }
  c10::impl::GenericDict state = loaded->toGenericDict();
  // A checkpoint of torchdistill's (save_ckpt: {'model': state_dict, 'optimizer': ..., ...}):
  // its model's state, as torchdistill's load_ckpt takes it.
  if (auto model = state.find(std::string("model"));
      model != state.end() && model->value().isGenericDict()) {
    state = model->value().toGenericDict();
  }
  std::vector<NamedTensor> targets = NamedParameters();
  for (NamedTensor& buffer : NamedBuffers()) targets.push_back(std::move(buffer));
  std::set<std::string> target_names;
  for (const auto& [name, target] : targets) target_names.insert(name);
  // torchvision's DenseNet weight files name a dense layer's modules as its first version did
  // ("denselayer1.norm.1.weight"); torchvision's _load_state_dict renames them with this pattern
  // ("denselayer1.norm1.weight"), and so does libkd where the model has the new name only.
  static const std::regex kLegacyDenseLayer(
      R"(^(.*denselayer\d+\.(?:norm|relu|conv))\.)"
      R"(((?:[12])\.(?:weight|bias|running_mean|running_var))$)");
  std::map<std::string, at::Tensor> file_tensors;
  for (const auto& entry : state) {
    if (!entry.key().isString() || !entry.value().isTensor()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": entry ", entry.key().tagKind(),
                                                     " -> ", entry.value().tagKind(),
                                                     " is not a string -> tensor pair"));
    }
    std::string name = entry.key().toStringRef();
    std::smatch legacy;
    if (!target_names.count(name) && std::regex_match(name, legacy, kLegacyDenseLayer) &&
        target_names.count(legacy.str(1) + legacy.str(2))) {
      name = legacy.str(1) + legacy.str(2);
    }
    file_tensors.emplace(std::move(name), entry.value().toTensor());
  }

  std::vector<std::string> missing, mismatched;
  std::set<std::string> used;
  for (const auto& [name, target] : targets) {
    auto it = file_tensors.find(name);
    if (it == file_tensors.end()) {
      // Files from before BatchNorm counted its batches (torchvision's DenseNet weights) lack
      // num_batches_tracked: torch's BatchNorm keeps its own then, and so does libkd.
      if (!absl::EndsWith(name, ".num_batches_tracked")) missing.push_back(name);
      continue;
    }
    used.insert(name);
    if (!it->second.sizes().equals(target.sizes())) {
      mismatched.push_back(absl::StrCat(name, " (file ", ShapeString(it->second), ", model ",
                                        ShapeString(target), ")"));
    }
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, tensor] : file_tensors) {
    if (!used.count(name)) unexpected.push_back(name);
  }
  std::vector<std::string> problems;
  if (!mismatched.empty() && !options.ignore_mismatched_sizes) {
    problems.push_back("shape mismatch: " + JoinSome(mismatched));
  }
  if (options.strict && !missing.empty()) problems.push_back("missing keys: " + JoinSome(missing));
  if (options.strict && !unexpected.empty()) {
    problems.push_back("unexpected keys: " + JoinSome(unexpected));
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": does not fit this model: ", absl::StrJoin(problems, "; "),
        options.strict && mismatched.empty() ? " (LoadStateOptions.strict=false ignores keys)"
                                             : ""));
  }
  return CallTorch([&] {
    c10::NoGradGuard no_grad;
    for (auto& [name, target] : targets) {
      auto it = file_tensors.find(name);
      if (it != file_tensors.end() && it->second.sizes().equals(target.sizes())) {
        target.copy_(it->second);
      }
    }
  });
}

}  // namespace kd
