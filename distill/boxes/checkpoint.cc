#include "distill/boxes/checkpoint.h"

#include <filesystem>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/List.h>
#include <ATen/core/grad_mode.h>

#include "absl/strings/str_cat.h"
#include "base/ivalue_util.h"
#include "base/status_macros.h"
#include "base/torch_file.h"

namespace kd {
namespace {

absl::Status Bad(absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("not a libkd checkpoint: ", message));
}

const c10::IValue* Find(const c10::impl::GenericDict& dict, const char* key) {
  auto it = dict.find(key);
  return it == dict.end() ? nullptr : &it->value();
}

absl::Status NonNegativeInt(const c10::impl::GenericDict& dict, const char* key) {
  const c10::IValue* v = Find(dict, key);
  if (v == nullptr) return Bad(absl::StrCat("no \"", key, "\""));
  if (!v->isInt() || v->toInt() < 0) {
    return Bad(absl::StrCat("\"", key, "\" is ", v->tagKind(), v->isInt() ? " < 0" : "",
                            ", not an int >= 0"));
  }
  return absl::OkStatus();
}

// A dict of name -> tensor; `required` or absent.
absl::Status TensorDict(const c10::impl::GenericDict& dict, const char* key, bool required) {
  const c10::IValue* v = Find(dict, key);
  if (v == nullptr) {
    return required ? Bad(absl::StrCat("no \"", key, "\"")) : absl::OkStatus();
  }
  if (!v->isGenericDict())
    return Bad(absl::StrCat("\"", key, "\" is ", v->tagKind(), ", not a dict"));
  for (const auto& entry : v->toGenericDict()) {
    if (!entry.key().isString() || !entry.value().isTensor()) {
      return Bad(absl::StrCat("\"", key, "\" has an entry ", entry.key().tagKind(), " -> ",
                              entry.value().tagKind(), ", not name -> tensor"));
    }
  }
  return absl::OkStatus();
}

absl::Status ByteTensor(const c10::impl::GenericDict& dict, const char* key) {
  const c10::IValue* v = Find(dict, key);
  if (v == nullptr) return Bad(absl::StrCat("no \"", key, "\""));
  if (!v->isTensor() || v->toTensor().scalar_type() != at::kByte || v->toTensor().dim() != 1 ||
      !v->toTensor().device().is_cpu()) {
    return Bad(absl::StrCat("\"", key, "\" is not a 1-d uint8 CPU tensor"));
  }
  return absl::OkStatus();
}

absl::Status DoubleListAt(const c10::impl::GenericDict& dict, const char* key) {
  const c10::IValue* v = Find(dict, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->isDoubleList()) {
    if (!v->isList()) return Bad(absl::StrCat("\"", key, "\" is ", v->tagKind(), ", not a list"));
    for (const c10::IValue& e : v->toListRef()) {
      if (!e.isDouble()) return Bad(absl::StrCat("\"", key, "\" holds a ", e.tagKind()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckCheckpoint(const c10::IValue& value) {
  if (!value.isGenericDict())
    return Bad(absl::StrCat("it holds a ", value.tagKind(), ", not a dict"));
  const c10::impl::GenericDict dict = value.toGenericDict();
  for (const auto& entry : dict) {
    if (!entry.key().isString()) return Bad(absl::StrCat("a key is a ", entry.key().tagKind()));
  }
  const c10::IValue* format = Find(dict, "format");
  if (format == nullptr || !format->isString()) return Bad("no \"format\" string");
  if (format->toStringRef() != kCheckpointFormat) {
    return Bad(absl::StrCat("format \"", format->toStringRef(), "\"; this libkd reads \"",
                            kCheckpointFormat, "\""));
  }
  KD_RETURN_IF_ERROR(NonNegativeInt(dict, "stage"));
  KD_RETURN_IF_ERROR(NonNegativeInt(dict, "epoch"));
  if (const c10::IValue* best = Find(dict, "best"); best == nullptr || !best->isDouble()) {
    return Bad("no \"best\" number");
  }
  if (const c10::IValue* name = Find(dict, "stage_name"); name != nullptr && !name->isString()) {
    return Bad("\"stage_name\" is not a string");
  }
  KD_RETURN_IF_ERROR(TensorDict(dict, "student", /*required=*/true));
  KD_RETURN_IF_ERROR(TensorDict(dict, "teacher", /*required=*/false));
  KD_RETURN_IF_ERROR(ByteTensor(dict, "rng"));
  // The CPU generator's state has one size (mt19937's and a few more fields); another size is
  // damage, which libtorch's set_state would meet only at the resume.
  const int64_t rng_bytes = at::detail::getDefaultCPUGenerator().get_state().numel();
  if (const int64_t saved = Find(dict, "rng")->toTensor().numel(); saved != rng_bytes) {
    return Bad(absl::StrCat("its RNG state is ", saved, " bytes, this libtorch's CPU generator's ",
                            rng_bytes));
  }
  const c10::IValue* fresh = Find(dict, "fresh_stage");
  if (fresh != nullptr && !fresh->isBool()) return Bad("\"fresh_stage\" is not a bool");
  if (fresh != nullptr) return absl::OkStatus();  // the stage's own state is not read
  KD_RETURN_IF_ERROR(ByteTensor(dict, "optimizer"));
  if (const c10::IValue* kind = Find(dict, "optimizer_kind");
      kind != nullptr && !kind->isString()) {
    return Bad("\"optimizer_kind\" is not a string");
  }
  if (const c10::IValue* groups = Find(dict, "optimizer_groups");
      groups != nullptr && !groups->isIntList()) {
    return Bad("\"optimizer_groups\" is not a list of integers");
  }
  KD_RETURN_IF_ERROR(DoubleListAt(dict, "scheduler"));
  KD_RETURN_IF_ERROR(DoubleListAt(dict, "grad_scaler"));
  KD_RETURN_IF_ERROR(NonNegativeInt(dict, "grad_count"));
  KD_RETURN_IF_ERROR(TensorDict(dict, "loss_state", /*required=*/true));
  KD_RETURN_IF_ERROR(TensorDict(dict, "auxiliary_modules", /*required=*/false));
  return absl::OkStatus();
}

absl::StatusOr<c10::impl::GenericDict> ReadCheckpoint(const std::string& path) {
  KD_ASSIGN_OR_RETURN(c10::IValue saved, ReadTorchFile(path));
  if (absl::Status s = CheckCheckpoint(saved); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  }
  return saved.toGenericDict();
}

c10::impl::GenericDict StateDict(const Model& model) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::TensorType::get());
  for (const auto& list : {model.NamedParameters(), model.NamedBuffers()}) {
    for (const auto& [name, tensor] : list) dict.insert(name, tensor.detach().cpu());
  }
  return dict;
}

absl::Status LoadStateDict(Model& model, const c10::IValue& value, absl::string_view what) {
  if (!value.isGenericDict()) return absl::InvalidArgumentError(absl::StrCat(what, ": not a dict"));
  const c10::impl::GenericDict dict = value.toGenericDict();
  at::NoGradGuard no_grad;
  for (const auto& list : {model.NamedParameters(), model.NamedBuffers()}) {
    for (const auto& [name, tensor] : list) {
      auto it = dict.find(name);
      if (it == dict.end()) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": no tensor \"", name, "\""));
      }
      at::Tensor saved = it->value().toTensor();
      if (!saved.sizes().equals(tensor.sizes())) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": \"", name, "\" is ",
                                                       ShapeString(saved), ", the model's ",
                                                       ShapeString(tensor)));
      }
      if (saved.is_floating_point() && saved.numel() > 0 && !saved.isfinite().all().item<bool>()) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": \"", name,
            "\" holds NaN or infinite values: the checkpoint was saved from a run that diverged; "
            "resume from an earlier one"));
      }
      at::Tensor target = tensor;
      target.copy_(saved);
    }
  }
  return absl::OkStatus();
}

absl::Status WriteCheckpointFiles(const c10::IValue& value, const std::string& dir,
                                  const CheckpointConfig& config, const std::string& stage,
                                  int64_t epochs_done, bool improved, bool stage_done) {
  namespace fs = std::filesystem;
  if (!config.has_save_last() || config.save_last()) {
    KD_RETURN_IF_ERROR(WriteTorchFile((fs::path(dir) / "last.pt").string(), value));
  }
  if (improved && (!config.has_save_best() || config.save_best())) {
    KD_RETURN_IF_ERROR(WriteTorchFile((fs::path(dir) / "best.pt").string(), value));
  }
  if (stage_done) {  // the stage checkpoint: where the next stage starts
    KD_RETURN_IF_ERROR(
        WriteTorchFile((fs::path(dir) / absl::StrCat(stage, ".pt")).string(), value));
  }
  if (config.every_n_epochs() > 0 && epochs_done % config.every_n_epochs() == 0) {
    KD_RETURN_IF_ERROR(WriteTorchFile(
        (fs::path(dir) / absl::StrCat(stage, "_epoch", epochs_done, ".pt")).string(), value));
  }
  return absl::OkStatus();
}

}  // namespace kd
