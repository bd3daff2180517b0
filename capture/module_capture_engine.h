// ModuleCaptureEngine: captures the inputs and outputs of chosen modules during a forward, as
// silverspoon-kd's engine does (for blockwise distillation, analysis, debugging), on both
// model kinds, with optional truncation of the forward after the last captured module.
//
//   kd::ModuleCaptureEngine engine(*teacher, {"layer1", "layer2"}, {.auto_truncate = true});
//   KD_RETURN_IF_ERROR(engine.Register());
//   KD_RETURN_IF_ERROR(engine.Forward({x}).status());   // layer3, layer4, fc never run
//   KD_ASSIGN_OR_RETURN(auto inputs, engine.PopCapturedInputs(1));  // layer2's args, kwargs
//   KD_ASSIGN_OR_RETURN(c10::IValue out, engine.PopCapturedOutput(1));
//
// A module's id is its index in `modules_to_capture`. Truncation cuts TorchScript graphs (no
// exceptions, nothing after the cut is computed) and exits native forwards early through an
// exception that Forward itself catches; see Model::ForwardTruncated for what a cut skips and
// when it is refused.
#ifndef LIBKD_CAPTURE_MODULE_CAPTURE_ENGINE_H_
#define LIBKD_CAPTURE_MODULE_CAPTURE_ENGINE_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hooks/model.h"

namespace torch {
namespace nn {
class Module;
}  // namespace nn
namespace jit {
struct Module;
}  // namespace jit
}  // namespace torch

namespace kd {

// Options with silverspoon-kd's defaults.
struct CaptureOptions {
  // Deep-copy captured args/kwargs (a later in-place change cannot alter them); otherwise
  // they are detached views sharing memory with the forward's tensors. Default false.
  bool deepcopy_captured_args_and_kwargs = false;
  // Called after each captured module's forward with its id, positional args and output
  // (the output as the module returned it, not detached). Default none.
  std::function<void(int module_id, const std::vector<c10::IValue>& args,
                     const c10::IValue& output)>
      output_callback;
  // Store outputs detached from the autograd graph; false keeps the graph so gradients flow
  // through the captured outputs. Default true.
  bool detach_outputs = true;
  // Store inputs; false stores none, to save memory. Default true.
  bool capture_inputs = true;
  // Stop the forward after the last captured module. Default false.
  bool auto_truncate = false;
  // Captured values as the module took and returned them, whatever the rest of the forward
  // writes in place (default), or the model's own tensors (kd::HookValues::kReferences, as
  // silverspoon-kd keeps them; a cut that would skip such a write is then refused).
  HookValues values = HookValues::kAsReturned;
};

// What one module's capture holds.
struct Captured {
  std::vector<c10::IValue> args;
  Kwargs kwargs;  // module calls pass positional arguments: empty on both model kinds today
  c10::IValue output;
};

// Native modules given by handle rather than by path.
struct ModuleHandles {
  std::vector<std::shared_ptr<torch::nn::Module>> modules;
};

// TorchScript submodules given by handle (e.g. `teacher_module.attr("layer1").toModule()`);
// using it needs <torch/csrc/jit/api/module.h>.
struct ScriptModuleHandles {
  std::vector<torch::jit::Module> modules;
};

class ModuleCaptureEngine {
 public:
  // Modules by path in `model` ("" is not allowed: capture the model's output instead).
  ModuleCaptureEngine(Model& model, std::vector<std::string> modules_to_capture,
                      CaptureOptions options = {});
  // Native modules by handle: each must be a module of `model` (found by identity).
  ModuleCaptureEngine(Model& model, const ModuleHandles& modules_to_capture,
                      CaptureOptions options = {});
  // TorchScript submodules by handle: each must be a module of `model` (found by identity).
  ModuleCaptureEngine(Model& model, const ScriptModuleHandles& modules_to_capture,
                      CaptureOptions options = {});
  ~ModuleCaptureEngine();
  ModuleCaptureEngine(const ModuleCaptureEngine&) = delete;
  ModuleCaptureEngine& operator=(const ModuleCaptureEngine&) = delete;

  // Starts capturing. Errors: registered already (FailedPrecondition); an unknown module path
  // or handle (NotFound, with the nearest paths); a module forward never calls.
  absl::Status Register();
  // Stops capturing and removes every tap: the model runs as before.
  void Deregister();
  bool is_registered() const { return !taps_.empty(); }

  // Runs the model's forward (truncated with auto_truncate; then it returns None). Errors:
  // a capture rule broken during the forward (inputs captured twice), a refused cut, and
  // compute errors, as statuses.
  absl::StatusOr<c10::IValue> Forward(std::vector<c10::IValue> args, const Kwargs& kwargs = {});

  // Drops everything captured.
  void ClearCaptured();
  // (args, kwargs, output) of module `id`; NotFound naming the id and what was captured.
  absl::StatusOr<Captured> GetCaptured(int id) const;
  // Returns and removes module `id`'s captured (args, kwargs) / output.
  absl::StatusOr<std::pair<std::vector<c10::IValue>, Kwargs>> PopCapturedInputs(int id);
  absl::StatusOr<c10::IValue> PopCapturedOutput(int id);

  const std::vector<std::string>& module_paths() const { return paths_; }

  // Registers on construction, deregisters on destruction (silverspoon's `with engine:`).
  class Scope {
   public:
    explicit Scope(ModuleCaptureEngine& engine) : engine_(engine) { status_ = engine.Register(); }
    ~Scope() { engine_.Deregister(); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    // The result of Register().
    const absl::Status& status() const { return status_; }

   private:
    ModuleCaptureEngine& engine_;
    absl::Status status_;
  };

 private:
  void OnCall(int id, const std::vector<c10::IValue>& args, const c10::IValue& output);
  std::string DescribeCaptured() const;
  // 'module 1 ("layer2")', or "module id 7" for an id out of range.
  std::string Name(int id) const;
  // Records `path` for handle `index`, or the first "not a module of this model" error.
  void AddHandlePath(size_t index, const std::optional<std::string>& path,
                     const std::string& type);

  Model& model_;
  std::vector<std::string> paths_;
  absl::Status paths_status_;  // a handle that is not in the model
  CaptureOptions options_;
  std::vector<HookHandle> taps_;
  std::map<int, std::vector<c10::IValue>> args_;
  std::map<int, Kwargs> kwargs_;
  std::map<int, c10::IValue> outputs_;
  std::optional<std::string> error_;  // a rule broken inside a forward
  std::set<int> called_;              // the modules called in the current Forward
};

}  // namespace kd

#endif  // LIBKD_CAPTURE_MODULE_CAPTURE_ENGINE_H_
