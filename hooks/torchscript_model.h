// TorchScript models (torch::jit::Module) behind the kd::Model handle.
//
//   KD_ASSIGN_OR_RETURN(std::unique_ptr<kd::Model> model, kd::LoadTorchScriptModel("m.pt"));
//   KD_ASSIGN_OR_RETURN(kd::HookHandle tap, model->AddHook("layer2.0.conv1", fn));
//   model->Forward({x});   // fn sees layer2.0.conv1's args and output
//
// Taps need no change to the model: forward's graph is copied, the calls on the way to each
// tapped module are inlined, and a side-effecting `kd::tap` op is placed after every call of a
// tapped module (in loops and branches too). The copy runs as its own function with the loaded
// module as `self`, so the module itself is never modified and always sees its current
// parameters; with no taps left, Forward runs the module's own forward again.
#ifndef LIBKD_HOOKS_TORCHSCRIPT_MODEL_H_
#define LIBKD_HOOKS_TORCHSCRIPT_MODEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "hooks/model.h"

namespace torch {
namespace jit {
struct Module;
}  // namespace jit
}  // namespace torch

namespace kd {

// Loads a file written by Python's torch.jit.save (or torch::jit::Module::save) on the CPU.
// Errors name the file: NotFound / PermissionDenied when it cannot be read, InvalidArgument
// when it is not a TorchScript archive.
absl::StatusOr<std::unique_ptr<Model>> LoadTorchScriptModel(const std::string& path);

// Wraps a module already in memory. The handle shares the module (jit modules are handles).
std::unique_ptr<Model> MakeTorchScriptModel(const torch::jit::Module& module);

// The wrapped module of a TorchScript Model, or nullptr for other kinds.
const torch::jit::Module* GetTorchScriptModule(const Model& model);

}  // namespace kd

#endif  // LIBKD_HOOKS_TORCHSCRIPT_MODEL_H_
