#include "hooks/forward_hook_manager.h"

#include <algorithm>
#include <set>
#include <utility>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/ivalue_util.h"
#include "base/nearest.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "hooks/hook_point.h"
#include "hooks/native_model.h"

namespace kd {
namespace {

std::string DeviceKey(const c10::IValue& output, const c10::IValue& input) {
  std::optional<c10::Device> device = FirstTensorDevice(output);
  if (!device) device = FirstTensorDevice(input);
  if (!device || device->is_cpu()) return "cpu";  // short string: no allocation
  return device->str();
}

// torchdistill's gather: tensors concatenated on dim 0, tuples and lists element-wise.
c10::IValue Gather(const std::vector<c10::IValue>& values, c10::Device device) {
  const c10::IValue& first = values.front();
  if (first.isTensor()) {
    std::vector<at::Tensor> parts;
    for (const c10::IValue& v : values) parts.push_back(v.toTensor().to(device));
    return at::cat(parts, 0);
  }
  if (first.isTuple()) {
    std::vector<c10::IValue> gathered;
    for (size_t i = 0; i < first.toTupleRef().elements().size(); ++i) {
      std::vector<c10::IValue> column;
      for (const c10::IValue& v : values) column.push_back(v.toTupleRef().elements()[i]);
      gathered.push_back(Gather(column, device));
    }
    return c10::ivalue::Tuple::create(std::move(gathered));
  }
  return ToDevice(values.back(), device);
}

}  // namespace

ForwardHookManager::HookHandle::HookHandle(HookHandle&& other) noexcept
    : manager_(std::exchange(other.manager_, {})), id_(other.id_) {}

ForwardHookManager::HookHandle& ForwardHookManager::HookHandle::operator=(
    HookHandle&& other) noexcept {
  if (this != &other) {
    Reset();
    manager_ = std::exchange(other.manager_, {});
    id_ = other.id_;
  }
  return *this;
}

ForwardHookManager::HookHandle::~HookHandle() { Reset(); }

void ForwardHookManager::HookHandle::Reset() {
  if (auto manager = std::exchange(manager_, {}).lock()) (*manager)->RemoveHook(id_);
}

ForwardHookManager::ForwardHookManager(c10::Device target_device)
    : target_device_(target_device) {}

ForwardHookManager::~ForwardHookManager() { Clear(); }

absl::Status ForwardHookManager::CheckNewHook(const std::string& key,
                                              const HookOptions& options) const {
  if (!options.requires_input && !options.requires_output) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hook on ", QuoteName(key), ": requires_input and requires_output are both false, so "
        "it would record nothing; set at least one"));
  }
  if (options.stacks_accumulated && !options.accumulates) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hook on ", QuoteName(key), ": stacks_accumulated requires accumulates (there is only "
        "one value to stack otherwise); set accumulates = true"));
  }
  for (const auto& hook : hooks_) {
    if (hook->key == key) {
      return absl::InvalidArgumentError(absl::StrCat(
          "I/O dict key ", QuoteName(key), " is hooked already; use AddHookToModule with "
          "another io_key to record the same module twice"));
    }
  }
  return absl::OkStatus();
}

std::unique_ptr<ForwardHookManager::Hook> ForwardHookManager::NewHook(
    const std::string& io_key, const HookOptions& options) {
  auto hook = std::make_unique<Hook>();
  hook->id = next_id_++;
  hook->key = io_key;
  hook->options = options;
  return hook;
}

NativeHookFn ForwardHookManager::Recorder(const std::string& io_key, const HookOptions& options) {
  return [this, key = io_key, options](const std::vector<c10::IValue>& args,
                                       const c10::IValue& output) {
    Record(key, options, args, output);
  };
}

int64_t ForwardHookManager::Keep(std::unique_ptr<Hook> hook) {
  io_[hook->key];  // the key exists (empty) from now on, as in torchdistill
  hooks_.push_back(std::move(hook));
  return hooks_.back()->id;
}

absl::StatusOr<int64_t> ForwardHookManager::AddModelHook(Model& model,
                                                         absl::string_view module_path,
                                                         std::string io_key,
                                                         const HookOptions& options) {
  KD_RETURN_IF_ERROR(CheckNewHook(io_key, options));
  std::unique_ptr<Hook> hook = NewHook(io_key, options);
  hook->model = &model;
  KD_ASSIGN_OR_RETURN(hook->tap, model.AddTap(module_path, Recorder(io_key, options)));
  return Keep(std::move(hook));
}

absl::Status ForwardHookManager::AddHook(Model& model, absl::string_view module_path,
                                         const HookOptions& options) {
  return AddModelHook(model, module_path, std::string(module_path), options).status();
}

absl::Status ForwardHookManager::AddHookToModule(Model& model, absl::string_view module_path,
                                                 std::string io_key,
                                                 const HookOptions& options) {
  return AddModelHook(model, module_path, std::move(io_key), options).status();
}

absl::Status ForwardHookManager::AddHookToModule(const torch::nn::Module& module,
                                                 std::string io_key,
                                                 const HookOptions& options) {
  KD_RETURN_IF_ERROR(CheckNewHook(io_key, options));
  std::unique_ptr<Hook> hook = NewHook(io_key, options);
  hook->module_type = NativeTypeName(module);
  hook->native_hook = AddNativeHook(module, Recorder(io_key, options));
  Keep(std::move(hook));
  return absl::OkStatus();
}

absl::StatusOr<ForwardHookManager::HookHandle> ForwardHookManager::AddScopedHook(
    Model& model, absl::string_view module_path, const HookOptions& options) {
  KD_ASSIGN_OR_RETURN(int64_t id,
                      AddModelHook(model, module_path, std::string(module_path), options));
  return HookHandle(alive_, id);
}

void ForwardHookManager::Record(const std::string& key, const HookOptions& options,
                                const std::vector<c10::IValue>& args,
                                const c10::IValue& output) {
  const c10::IValue input =
      args.size() == 1 ? args[0] : c10::IValue(c10::ivalue::Tuple::create(args));
  c10::IValue out = output;
  if (out.isTuple() && out.toTupleRef().elements().size() == 1) {
    out = out.toTupleRef().elements()[0];
  }
  const std::string device = DeviceKey(out, input);
  auto& entry = io_[key];
  auto store = [&](const char* io_type, const c10::IValue& value) {
    std::vector<c10::IValue>& values = entry[io_type][device];
    if (!options.accumulates) values.clear();
    values.push_back(value);
  };
  if (options.requires_input) store(kInput, input);
  if (options.requires_output) store(kOutput, out);
}

void ForwardHookManager::RemoveHook(int64_t id) {
  auto it = std::find_if(hooks_.begin(), hooks_.end(),
                         [id](const auto& hook) { return hook->id == id; });
  if (it == hooks_.end()) return;
  if ((*it)->native_hook >= 0) RemoveNativeHook((*it)->native_hook);
  io_.erase((*it)->key);
  hooks_.erase(it);  // the TapHandle removes the model tap
}

absl::Status ForwardHookManager::CheckHooksFired() const {
  std::set<const Model*> models;
  std::vector<std::string> silent;
  for (const auto& hook : hooks_) {
    if (hook->model != nullptr) {
      models.insert(hook->model);
    } else if (!NativeHookFired(hook->native_hook)) {
      silent.push_back(absl::StrCat("\"", hook->key, "\" (", hook->module_type, ")"));
    }
  }
  for (const Model* model : models) KD_RETURN_IF_ERROR(model->CheckTapsFired());
  if (silent.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "hooked module(s) ", absl::StrJoin(silent, ", "),
      " never ran through a hook point during forward: a native module's hooks run only when "
      "its parent calls it through kd::Call(child, ...) or keeps it in a kd::HookedSequential, "
      "not through child->forward(...) (see hooks/hook_point.h)"));
}

absl::StatusOr<c10::IValue> ForwardHookManager::Finish(const std::string& key,
                                                       const HookOptions& options,
                                                       absl::string_view io_type,
                                                       std::vector<c10::IValue> values) const {
  if (!options.accumulates) return values.back();
  if (!options.stacks_accumulated) {
    c10::impl::GenericList list(c10::AnyType::get());
    for (c10::IValue& v : values) list.push_back(std::move(v));
    return c10::IValue(list);
  }
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& v : values) {
    if (!v.isTensor()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot stack the accumulated ", io_type, " of ", QuoteName(key), ": a call gave a ",
          v.tagKind(), ", not a tensor; drop stacks_accumulated for this hook"));
    }
    tensors.push_back(v.toTensor());
  }
  for (const at::Tensor& t : tensors) {
    if (!t.sizes().equals(tensors.front().sizes())) {
      std::vector<std::string> shapes;
      for (const at::Tensor& s : tensors) shapes.push_back(ShapeString(s));
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot stack the accumulated ", io_type, " of ", QuoteName(key),
          ": shapes differ (", absl::StrJoin(shapes, ", "),
          "); drop stacks_accumulated or keep the shapes equal"));
    }
  }
  return c10::IValue(at::stack(tensors, 0));
}

absl::StatusOr<IoDict> ForwardHookManager::PopIoDict() {
  KD_RETURN_IF_ERROR(CheckHooksFired());
  IoDict result;
  for (const auto& hook : hooks_) {
    auto& entry = io_[hook->key];
    auto& out = result[hook->key];
    for (auto& [io_type, by_device] : entry) {
      if (by_device.empty()) continue;
      std::vector<c10::IValue> values;
      if (by_device.size() == 1) {
        for (c10::IValue& v : by_device.begin()->second) {
          values.push_back(ToDevice(v, target_device_));
        }
      } else {
        // Several devices (replicas): gather call i of every device.
        size_t calls = by_device.begin()->second.size();
        for (const auto& [device, v] : by_device) calls = std::min(calls, v.size());
        for (size_t i = 0; i < calls; ++i) {
          std::vector<c10::IValue> per_device;
          for (const auto& [device, v] : by_device) per_device.push_back(v[i]);
          KD_ASSIGN_OR_RETURN(c10::IValue gathered,
                              CallTorch([&] { return Gather(per_device, target_device_); }));
          values.push_back(std::move(gathered));
        }
      }
      KD_ASSIGN_OR_RETURN(out[io_type],
                          Finish(hook->key, hook->options, io_type, std::move(values)));
    }
    entry.clear();
  }
  return result;
}

absl::StatusOr<IoDict> ForwardHookManager::PopIoDictFromDevice(c10::Device device) {
  KD_RETURN_IF_ERROR(CheckHooksFired());
  IoDict result;
  for (const auto& hook : hooks_) {
    auto& out = result[hook->key];
    for (auto& [io_type, by_device] : io_[hook->key]) {
      auto it = by_device.find(device.str());
      if (it == by_device.end()) continue;
      std::vector<c10::IValue> values = std::move(it->second);
      by_device.erase(it);
      KD_ASSIGN_OR_RETURN(out[io_type],
                          Finish(hook->key, hook->options, io_type, std::move(values)));
    }
  }
  return result;
}

void ForwardHookManager::ChangeTargetDevice(c10::Device device) {
  if (device.type() != target_device_.type()) ClearIoDict();
  target_device_ = device;
}

void ForwardHookManager::ClearIoDict() {
  for (auto& [key, entry] : io_) entry.clear();
}

void ForwardHookManager::Clear() {
  for (const auto& hook : hooks_) {
    if (hook->native_hook >= 0) RemoveNativeHook(hook->native_hook);
  }
  hooks_.clear();
  io_.clear();
}

std::vector<std::string> ForwardHookManager::HookedKeys() const {
  std::vector<std::string> keys;
  for (const auto& hook : hooks_) keys.push_back(hook->key);
  return keys;
}

}  // namespace kd
