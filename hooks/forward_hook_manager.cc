#include "hooks/forward_hook_manager.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <tuple>
#include <utility>

#include <ATen/core/ivalue.h>

#include "absl/strings/str_cat.h"
#include "base/ivalue_util.h"
#include "base/nearest.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "hooks/hook_point.h"
#include "hooks/internal/manager_hook.h"
#include "hooks/internal/recorded_values.h"
#include "hooks/internal/tap_list.h"
#include "hooks/internal/write_guard.h"
#include "hooks/native_model.h"

namespace kd {

ForwardHookManager::ForwardHookManager(c10::Device target_device)
    : target_device_(target_device),
      write_guards_(std::make_unique<hooks_internal::WriteGuards>()) {}

ForwardHookManager::~ForwardHookManager() { Clear(); }

absl::Status ForwardHookManager::CheckNewHook(const std::string& key,
                                              const HookOptions& options) const {
  if (!options.requires_input && !options.requires_output) {
    return absl::InvalidArgumentError(
        absl::StrCat("hook on ", QuoteName(key),
                     ": requires_input and requires_output are both false, so "
                     "it would record nothing; set at least one"));
  }
  if (options.stacks_accumulated && !options.accumulates) {
    return absl::InvalidArgumentError(
        absl::StrCat("hook on ", QuoteName(key),
                     ": stacks_accumulated requires accumulates (there is only "
                     "one value to stack otherwise); set accumulates = true"));
  }
  for (const auto& hook : hooks_) {
    if (hook->key == key) {
      return absl::InvalidArgumentError(
          absl::StrCat("I/O dict key ", QuoteName(key),
                       " is hooked already; use AddHookToModule with "
                       "another io_key to record the same module twice"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ForwardHookManager::Hook*> ForwardHookManager::Keep(
    std::unique_ptr<Hook> hook, const std::function<absl::StatusOr<HookHandle>(HookFn)>& attach) {
  KD_RETURN_IF_ERROR(CheckNewHook(hook->key, hook->options));
  Hook* raw = hook.get();
  // A CallSpanHook: TorchScript's taps call the recorder without an argument vector.
  KD_ASSIGN_OR_RETURN(hook->handle, attach(hooks_internal::CallSpanHook{raw}));
  hooks_.push_back(std::move(hook));
  sorted_hooks_.clear();
  return raw;
}

HookValues ForwardHookManager::GuardWrites(Hook& hook, bool knows_later_writes) {
  if (hook.options.values != HookValues::kAsReturned || knows_later_writes) {
    return hook.options.values;
  }
  hook.write_guards = write_guards_.get();
  return HookValues::kReferences;  // kept as returned by the write guards
}

absl::StatusOr<ForwardHookManager::Hook*> ForwardHookManager::AddModelHook(
    Model& model, absl::string_view module_path, std::string io_key, const HookOptions& options) {
  auto hook = std::make_unique<Hook>();
  hook->key = std::move(io_key);
  hook->options = options;
  hook->model = &model;
  const HookValues values = GuardWrites(*hook, model.knows_later_writes());
  return Keep(std::move(hook),
              [&](HookFn fn) { return model.AddHook(module_path, std::move(fn), values); });
}

absl::Status ForwardHookManager::AddHook(Model& model, absl::string_view module_path,
                                         const HookOptions& options) {
  return AddModelHook(model, module_path, std::string(module_path), options).status();
}

absl::Status ForwardHookManager::AddHookToModule(Model& model, absl::string_view module_path,
                                                 std::string io_key, const HookOptions& options) {
  return AddModelHook(model, module_path, std::move(io_key), options).status();
}

absl::Status ForwardHookManager::AddHookToModule(const torch::nn::Module& module,
                                                 std::string io_key, const HookOptions& options) {
  auto hook = std::make_unique<Hook>();
  hook->key = std::move(io_key);
  hook->options = options;
  hook->module_type = NativeTypeName(module);
  const HookValues values = GuardWrites(*hook, /*knows_later_writes=*/false);
  return Keep(std::move(hook),
              [&](HookFn fn) -> absl::StatusOr<HookHandle> {
                return AddNativeHook(module, std::move(fn), values);
              })
      .status();
}

absl::StatusOr<HookHandle> ForwardHookManager::AddScopedHook(Model& model,
                                                             absl::string_view module_path,
                                                             const HookOptions& options) {
  KD_ASSIGN_OR_RETURN(Hook * hook,
                      AddModelHook(model, module_path, std::string(module_path), options));
  return HookHandle([alive = std::weak_ptr<ForwardHookManager*>(alive_), hook] {
    if (auto manager = alive.lock()) (*manager)->RemoveHook(hook);
  });
}

void ForwardHookManager::RemoveHook(const Hook* hook) {
  auto it =
      std::find_if(hooks_.begin(), hooks_.end(), [hook](const auto& h) { return h.get() == hook; });
  if (it != hooks_.end()) hooks_.erase(it);  // its handle removes the hook
  sorted_hooks_.clear();
}

absl::Status ForwardHookManager::CheckHooksFired() {
  SortedHooks();  // models_ up to date
  bool raw_modules = false;
  for (const Model* model : models_) {
    if (model == nullptr) {
      raw_modules = true;
    } else {
      KD_RETURN_IF_ERROR(model->CheckHooksFired());
    }
  }
  if (!raw_modules) return absl::OkStatus();
  std::vector<std::string> silent;
  for (const auto& hook : hooks_) {
    if (hook->model == nullptr && !hook->fired) {
      silent.push_back(absl::StrCat("\"", hook->key, "\" (", hook->module_type, ")"));
    }
  }
  if (silent.empty()) return absl::OkStatus();
  return NeverRanThroughHookPointError(silent);
}

namespace {

// Moves `value` to `device` into `slot` (None), leaving None.
[[gnu::always_inline]] inline void MoveTo(c10::IValue& value, c10::Device device,
                                          c10::IValue& slot) {
  if (value.isTensor() && value.unsafeToTensorImpl()->device() == device) [[likely]] {
    // Moved in place of the None (IValue's move assignment would swap: twice the work).
    std::destroy_at(&slot);
    std::construct_at(&slot, std::move(value));
  } else {
    slot = ToDevice(value, device);
    value = c10::IValue();
  }
}

}  // namespace

[[gnu::always_inline]] inline void ForwardHookManager::TakeLast(
    std::vector<hooks_internal::RecordedOnDevice>& recorded,
    hooks_internal::WriteGuards* write_guards, IoEntry& out, int slot) const {
  if (recorded.empty()) return;
  hooks_internal::RecordedOnDevice& on = recorded.front();
  std::vector<c10::IValue>& values = on.values;
  if (values.empty()) return;
  c10::IValue& last = values.back();
  if (write_guards != nullptr) write_guards->ResolveInPlace(last, on.guards[values.size() - 1]);
  MoveTo(last, target_device_, out.values_[slot]);
  out.has_[slot] = true;
  values.pop_back();
}

absl::StatusOr<IoDict> ForwardHookManager::PopIoDict() {
  KD_RETURN_IF_ERROR(CheckHooksFired());
  IoDict result;
  const std::vector<Hook*>& sorted = SortedHooks();
  result.entries_.reserve(sorted.size());
  for (Hook* hook : sorted) {
    // Keys are unique and sorted: appended unchecked.
    IoEntry& out = result.entries_
                       .emplace_back(std::piecewise_construct, std::forward_as_tuple(hook->key),
                                     std::forward_as_tuple())
                       .second;
    if (hook->last.set) [[likely]] {
      // The common case: the last call's values, as returned, moved out.
      if (hook->write_guards != nullptr) hook->ResolveLast();
      if (hook->options.requires_input) {
        MoveTo(hook->last.values[0], target_device_, out.values_[0]);
        out.has_[0] = true;
      }
      if (hook->options.requires_output) {
        MoveTo(hook->last.values[1], target_device_, out.values_[1]);
        out.has_[1] = true;
      }
      hook->last.set = false;
      continue;
    }
    hook->spilled = false;  // what is spilled is popped below
    if (!hook->options.accumulates && hook->input.size() <= 1 && hook->output.size() <= 1) {
      // One device, the last call's values, as returned, moved out.
      TakeLast(hook->input, hook->write_guards, out, 0);
      TakeLast(hook->output, hook->write_guards, out, 1);
      continue;
    }
    hook->Resolve();
    for (int slot : {0, 1}) KD_RETURN_IF_ERROR(PopCalls(*hook, slot, out));
    hook->Clear();
  }
  write_guards_->Reset();
  return result;
}

absl::Status ForwardHookManager::PopCalls(Hook& hook, int slot, IoEntry& out) {
  Hook::Recorded& recorded = slot == 0 ? hook.input : hook.output;
  const char* io_type = slot == 0 ? kInput : kOutput;
  Hook::OnDevice* only = nullptr;  // the one device with values, if there is one
  int devices = 0;
  for (Hook::OnDevice& d : recorded) {
    if (!d.values.empty()) {
      only = &d;
      ++devices;
    }
  }
  if (devices == 0) return absl::OkStatus();
  if (devices == 1 && !hook.options.accumulates) {
    out[io_type] = ToDevice(only->values.back(), target_device_);
    return absl::OkStatus();
  }
  std::vector<c10::IValue> values;
  if (devices == 1) {
    values.reserve(only->values.size());
    for (const c10::IValue& v : only->values) values.push_back(ToDevice(v, target_device_));
  } else {
    // Several devices (replicas): gather call i of every device.
    size_t calls = SIZE_MAX;
    for (const Hook::OnDevice& d : recorded) {
      if (!d.values.empty()) calls = std::min(calls, d.values.size());
    }
    for (size_t i = 0; i < calls; ++i) {
      std::vector<c10::IValue> per_device;
      for (const Hook::OnDevice& d : recorded) {
        if (!d.values.empty()) per_device.push_back(d.values[i]);
      }
      KD_ASSIGN_OR_RETURN(c10::IValue gathered, CallTorch([&] {
                            return hooks_internal::Gather(per_device, target_device_);
                          }));
      values.push_back(std::move(gathered));
    }
  }
  KD_ASSIGN_OR_RETURN(out[io_type], hook.Finish(io_type, std::move(values)));
  return absl::OkStatus();
}

namespace {

// `hooks` in key order into `sorted`, and the distinct models they hook into `models` (null
// for raw native modules).
template <typename Hook>
[[gnu::noinline]] void SortHooks(const std::vector<std::unique_ptr<Hook>>& hooks,
                                 std::vector<Hook*>& sorted, std::vector<const Model*>& models) {
  sorted.clear();
  models.clear();
  for (const auto& hook : hooks) {
    sorted.push_back(hook.get());
    if (std::find(models.begin(), models.end(), hook->model) == models.end()) {
      models.push_back(hook->model);
    }
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const Hook* a, const Hook* b) { return a->key < b->key; });
}

}  // namespace

const std::vector<ForwardHookManager::Hook*>& ForwardHookManager::SortedHooks() {
  if (sorted_hooks_.size() != hooks_.size()) [[unlikely]] {
    SortHooks(hooks_, sorted_hooks_, models_);
  }
  return sorted_hooks_;
}

absl::StatusOr<IoDict> ForwardHookManager::PopIoDictFromDevice(c10::Device device) {
  KD_RETURN_IF_ERROR(CheckHooksFired());
  IoDict result;
  for (const auto& hook : hooks_) {
    hook->Spill();
    auto& out = result[hook->key];
    for (auto [io_type, recorded] :
         {std::pair(kInput, &hook->input), std::pair(kOutput, &hook->output)}) {
      for (Hook::OnDevice& d : *recorded) {
        if (d.device != device || d.values.empty()) continue;
        hook->Resolve(d);
        std::vector<c10::IValue> values = std::exchange(d.values, {});
        KD_ASSIGN_OR_RETURN(out[io_type], hook->Finish(io_type, std::move(values)));
      }
    }
    // Other devices' values stay for their pop; with none left, calls go to `last` again.
    hook->spilled = hook->Holds();
  }
  write_guards_->Reset();
  return result;
}

void ForwardHookManager::ChangeTargetDevice(c10::Device device) {
  if (device.type() != target_device_.type()) ClearIoDict();
  target_device_ = device;
}

void ForwardHookManager::ClearIoDict() {
  for (const auto& hook : hooks_) hook->Clear();
  write_guards_->Reset();
}

void ForwardHookManager::Clear() {
  sorted_hooks_.clear();
  hooks_.clear();
  write_guards_->Reset();
}

std::vector<std::string> ForwardHookManager::HookedKeys() const {
  std::vector<std::string> keys;
  for (const auto& hook : hooks_) keys.push_back(hook->key);
  return keys;
}

}  // namespace kd
