#include "capture/module_capture_engine.h"

#include <utility>

#include <torch/csrc/jit/api/module.h>
#include <torch/nn/module.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/ivalue_util.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "hooks/native_model.h"
#include "hooks/torchscript_model.h"

namespace kd {

ModuleCaptureEngine::ModuleCaptureEngine(Model& model, std::vector<std::string> modules_to_capture,
                                         CaptureOptions options)
    : model_(model), paths_(std::move(modules_to_capture)), options_(std::move(options)) {}

ModuleCaptureEngine::ModuleCaptureEngine(Model& model, const ModuleHandles& handles,
                                         CaptureOptions options)
    : model_(model), options_(std::move(options)) {
  std::shared_ptr<torch::nn::Module> root = GetNativeModule(model);
  for (size_t i = 0; i < handles.modules.size(); ++i) {
    const torch::nn::Module* wanted = handles.modules[i].get();
    std::optional<std::string> path;
    if (root != nullptr) {
      for (const auto& item : root->named_modules()) {
        if (item.value().get() == wanted) path = item.key();
      }
    }
    AddHandlePath(i, path, wanted ? NativeTypeName(*wanted) : "null");
  }
}

ModuleCaptureEngine::ModuleCaptureEngine(Model& model, const ScriptModuleHandles& handles,
                                         CaptureOptions options)
    : model_(model), options_(std::move(options)) {
  const torch::jit::Module* root = GetTorchScriptModule(model);
  for (size_t i = 0; i < handles.modules.size(); ++i) {
    const torch::jit::Module& wanted = handles.modules[i];
    std::optional<std::string> path;
    if (root != nullptr) {
      for (const auto& item : root->named_modules()) {
        if (item.value._ivalue().get() == wanted._ivalue().get()) path = item.name;
      }
    }
    const auto& name = wanted.type()->name();
    AddHandlePath(i, path, name ? name->name() : wanted.type()->str());
  }
}

void ModuleCaptureEngine::AddHandlePath(size_t index, const std::optional<std::string>& path,
                                        const std::string& type) {
  if (!path && paths_status_.ok()) {
    paths_status_ = absl::NotFoundError(
        absl::StrCat("module ", index, " (", type, ") is not a module of this ", model_.kind(),
                     " model; pass modules reached from the model's root, or module paths"));
  }
  paths_.push_back(path.value_or(""));
}

ModuleCaptureEngine::~ModuleCaptureEngine() { Deregister(); }

absl::Status ModuleCaptureEngine::Register() {
  KD_RETURN_IF_ERROR(paths_status_);
  if (is_registered()) {
    return absl::FailedPreconditionError(
        "ModuleCaptureEngine is registered already; call Deregister() first");
  }
  for (size_t i = 0; i < paths_.size(); ++i) {
    if (paths_[i].empty()) {
      Deregister();
      return absl::InvalidArgumentError(absl::StrCat(
          "module ", i, " is the root \"\": capture the model's output from Forward instead"));
    }
    const int id = static_cast<int>(i);
    absl::StatusOr<HookHandle> tap = model_.AddHook(
        paths_[i],
        [this, id](const std::vector<c10::IValue>& args, const c10::IValue& output) {
          OnCall(id, args, output);
        },
        options_.values);
    if (!tap.ok()) {
      Deregister();  // leave nothing half-registered
      return tap.status();
    }
    taps_.push_back(*std::move(tap));
  }
  return absl::OkStatus();
}

void ModuleCaptureEngine::Deregister() { taps_.clear(); }

std::string ModuleCaptureEngine::Name(int id) const {
  if (id < 0 || id >= static_cast<int>(paths_.size())) return absl::StrCat("module id ", id);
  return absl::StrCat("module ", id, " (\"", paths_[id], "\")");
}

void ModuleCaptureEngine::OnCall(int id, const std::vector<c10::IValue>& args,
                                 const c10::IValue& output) {
  const bool first_call = called_.insert(id).second;  // in this Forward
  if (options_.capture_inputs) {
    if (args_.count(id)) {
      // silverspoon asserts this too: inputs are captured once per step.
      error_ = !first_call ? absl::StrCat(Name(id),
                                          " ran twice in one forward, and its inputs are "
                                          "captured once per forward: capture its output only "
                                          "(capture_inputs = false), or record every call with a "
                                          "ForwardHookManager hook that accumulates")
                           : absl::StrCat(Name(id),
                                          " ran again before its captured inputs were popped "
                                          "or cleared: inputs are captured once per forward (call "
                                          "PopCapturedInputs or ClearCaptured between forwards)");
      TORCH_CHECK(false, *error_);
    }
    std::vector<c10::IValue> stored;
    for (const c10::IValue& a : args) {
      stored.push_back(options_.deepcopy_captured_args_and_kwargs ? a.deepcopy() : DetachValue(a));
    }
    args_[id] = std::move(stored);
    kwargs_[id] = Kwargs();
  }
  outputs_[id] = options_.detach_outputs ? DetachValue(output) : output;
  if (options_.output_callback) options_.output_callback(id, args, output);
}

absl::StatusOr<c10::IValue> ModuleCaptureEngine::Forward(std::vector<c10::IValue> args,
                                                         const Kwargs& kwargs) {
  if (!is_registered()) {
    return absl::FailedPreconditionError(
        "ModuleCaptureEngine::Forward before Register(): nothing would be captured");
  }
  error_.reset();
  called_.clear();
  absl::StatusOr<c10::IValue> result =
      options_.auto_truncate ? model_.ForwardTruncated(std::move(args), kwargs, paths_)
                             : CallTorch([&] { return model_.Forward(std::move(args), kwargs); });
  if (error_) return absl::FailedPreconditionError(*std::exchange(error_, std::nullopt));
  return result;
}

void ModuleCaptureEngine::ClearCaptured() {
  args_.clear();
  kwargs_.clear();
  outputs_.clear();
}

std::string ModuleCaptureEngine::DescribeCaptured() const {
  std::vector<std::string> parts;
  for (size_t i = 0; i < paths_.size(); ++i) {
    const int id = static_cast<int>(i);
    std::vector<std::string> what;
    if (args_.count(id)) what.push_back("inputs");
    if (outputs_.count(id)) what.push_back("output");
    if (!what.empty()) parts.push_back(absl::StrCat(id, " (", absl::StrJoin(what, ", "), ")"));
  }
  return parts.empty() ? "nothing is captured" : "captured: " + absl::StrJoin(parts, ", ");
}

absl::StatusOr<Captured> ModuleCaptureEngine::GetCaptured(int id) const {
  if (id < 0 || id >= static_cast<int>(paths_.size())) {
    return absl::NotFoundError(absl::StrCat("no module id ", id, ": ids are 0..", paths_.size() - 1,
                                            " (", DescribeCaptured(), ")"));
  }
  auto out = outputs_.find(id);
  if (out == outputs_.end() || (options_.capture_inputs && !args_.count(id))) {
    return absl::NotFoundError(
        absl::StrCat("nothing captured for ", Name(id), "; ", DescribeCaptured()));
  }
  Captured captured;
  if (auto a = args_.find(id); a != args_.end()) captured.args = a->second;
  if (auto k = kwargs_.find(id); k != kwargs_.end()) captured.kwargs = k->second;
  captured.output = out->second;
  return captured;
}

absl::StatusOr<std::pair<std::vector<c10::IValue>, Kwargs>> ModuleCaptureEngine::PopCapturedInputs(
    int id) {
  auto a = args_.find(id);
  if (a == args_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "no inputs captured for ", Name(id),
        options_.capture_inputs ? "" : " (capture_inputs is false)", "; ", DescribeCaptured()));
  }
  std::pair<std::vector<c10::IValue>, Kwargs> inputs{std::move(a->second), std::move(kwargs_[id])};
  args_.erase(a);
  kwargs_.erase(id);
  return inputs;
}

absl::StatusOr<c10::IValue> ModuleCaptureEngine::PopCapturedOutput(int id) {
  auto out = outputs_.find(id);
  if (out == outputs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no output captured for ", Name(id), "; ", DescribeCaptured()));
  }
  c10::IValue value = std::move(out->second);
  outputs_.erase(out);
  return value;
}

}  // namespace kd
