#include "distill/boxes/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/List.h>

#include "absl/strings/str_cat.h"
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

absl::Status NumberList(const c10::impl::GenericDict& dict, const char* key) {
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
  KD_RETURN_IF_ERROR(NumberList(dict, "scheduler"));
  KD_RETURN_IF_ERROR(NumberList(dict, "grad_scaler"));
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

}  // namespace kd
