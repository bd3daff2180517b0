// kd::Model: one handle over TorchScript modules and native torch::nn::Modules.
//
// Boxes, hook managers and tools see every model through this interface: forward on IValues,
// module paths ("layer2.0.conv1", "" for the root), parameters and buffers by path, train/eval,
// device and dtype moves, state save/load, and forward hooks by module path (hooks/hook.h).
//
//   KD_ASSIGN_OR_RETURN(std::unique_ptr<kd::Model> teacher,
//                       kd::LoadTorchScriptModel("resnet.pt"));     // torchscript_model.h
//   auto student = kd::MakeNativeModel(std::make_shared<MyNetImpl>());  // native_model.h
//   teacher->SetTraining(false);
//   c10::IValue out = teacher->Forward({x});
//
// Model sources are added by implementing this interface (an exported program, say); nothing
// that consumes a Model changes.
#ifndef LIBKD_HOOKS_MODEL_H_
#define LIBKD_HOOKS_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/ivalue_util.h"
#include "base/kwargs.h"
#include "hooks/hook.h"

namespace kd {

// A module of a model: its dotted path ("" for the root) and its type's short name as Python
// prints it ("Conv2d", "BasicBlock"; native "torch::nn::Conv2dImpl" -> "Conv2d").
struct ModuleInfo {
  std::string path;
  std::string type;
};

// A tensor with its dotted path ("layer1.0.conv1.weight").
using NamedTensor = std::pair<std::string, at::Tensor>;

// How Model::LoadState matches a file's keys with the model's parameters and buffers.
struct LoadStateOptions {
  // Unexpected or missing keys are errors when true; ignored when false.
  bool strict = true;
  // Tensors whose shapes differ are left as they are rather than errors (transformers'
  // ignore_mismatched_sizes).
  bool ignore_mismatched_sizes = false;
};

class Model {
 public:
  virtual ~Model() = default;

  // "torchscript" or "native".
  virtual std::string kind() const = 0;

  // Runs the model's forward. Throws c10::Error on compute errors, as libtorch does.
  virtual c10::IValue Forward(std::vector<c10::IValue> args, const Kwargs& kwargs = {}) = 0;

  // Runs forward only as far as the modules in `stop_after` need: their hooks fire, and what
  // comes after their last calls is not computed (TorchScript: the graph is cut; native: the
  // forward exits early once each has run). Returns None when cut short.
  // Skipped work has no effect: later modules' BatchNorm running statistics are not updated
  // and later random ops draw no numbers. Hooks on other modules fire only if they run before
  // the cut (TorchScript: not at all). FailedPrecondition where a cut would change what the
  // hooks see (an op after the cut modifies a captured value in place), with the reason;
  // Unimplemented for model kinds that cannot stop early.
  virtual absl::StatusOr<c10::IValue> ForwardTruncated(std::vector<c10::IValue> args,
                                                       const Kwargs& kwargs,
                                                       const std::vector<std::string>& stop_after);

  // A model over the module at `path` alone ("" is the whole model), sharing its parameters
  // and buffers: what it trains, this model has trained. Its forward is the module's own and
  // its paths are relative to it. For torchdistill's trimmed stage models (kd::SequentialModel,
  // hooks/sequential_model.h). NotFound for an unknown path (the nearest named);
  // FailedPrecondition where the module cannot run on its own (the reason and the fix);
  // Unimplemented for model kinds without sub-models.
  virtual absl::StatusOr<std::unique_ptr<Model>> Submodel(absl::string_view path) const;

  // Every module in pre-order, the root first with path "".
  virtual std::vector<ModuleInfo> NamedModules() const = 0;
  // Parameters and buffers, recursively, with dotted paths.
  virtual std::vector<NamedTensor> NamedParameters() const = 0;
  virtual std::vector<NamedTensor> NamedBuffers() const = 0;

  virtual void SetTraining(bool training) = 0;
  virtual bool is_training() const = 0;

  // Moves parameters and buffers to `device`; floating-point ones also to `dtype` if given
  // (as Python's Module.to does; libtorch's native Module::to would convert integer buffers).
  void To(c10::Device device, std::optional<c10::ScalarType> dtype = std::nullopt);

  // Adds `fn` as a forward hook on the module at `path` ("" hooks the whole model); the handle
  // removes it. Errors: NotFound naming the path and the nearest existing paths;
  // FailedPrecondition when the module can never be hooked (a TorchScript module that forward
  // never calls).
  virtual absl::StatusOr<HookHandle> AddHook(absl::string_view path, HookFn fn,
                                             HookValues values = HookValues::kAsReturned) = 0;

  // Whether AddHook with HookValues::kAsReturned copies exactly the values the forward writes
  // later (TorchScript: its graph says which), so that unwritten values cost nothing. When
  // false (native models: lazy copies of every value), ForwardHookManager records references
  // and guards them against later writes itself, which costs less per value.
  virtual bool knows_later_writes() const { return false; }

  // Checks that every hooked module ran through a hook point at least once since it was hooked,
  // if the model has run a forward since: a model that did not run (a teacher-only evaluation)
  // has bypassed nothing. FailedPrecondition from NeverRanThroughHookPointError otherwise.
  virtual absl::Status CheckHooksFired() const = 0;

  // OK if a module has `path`, else NotFound naming it and the nearest paths.
  absl::Status CheckModulePath(absl::string_view path) const;

  // Writes parameters and buffers to `path` atomically (a temporary file renamed into place),
  // in torch.save's format: Python's torch.load returns a dict path -> tensor.
  absl::Status SaveState(const std::string& path) const;
  // Reads a file written by SaveState or by Python's torch.save(model.state_dict()) and
  // copies its tensors into the model. Errors name the file and the offending keys/shapes.
  absl::Status LoadState(const std::string& path, const LoadStateOptions& options = {});

  // Total number of parameter elements (Python: sum(p.numel() for p in m.parameters())).
  int64_t NumParameters() const;
};

}  // namespace kd

#endif  // LIBKD_HOOKS_MODEL_H_
