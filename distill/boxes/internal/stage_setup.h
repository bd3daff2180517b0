// Internal to distill/boxes: the parts of a stage that need nothing of the stage but its models
// and config (requires_grad and frozen modules, loaders, the optimizer's parameter groups, the
// leak-detection options, the auxiliary modules) and the byte helpers of its checkpoint state.
#ifndef LIBKD_DISTILL_BOXES_INTERNAL_STAGE_SETUP_H_
#define LIBKD_DISTILL_BOXES_INTERNAL_STAGE_SETUP_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/modules/container/any.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "distill/boxes/metrics/metrics.h"
#include "distill/boxes/optim/optim.h"
#include "distill/config/distill_config.pb.h"
#include "distill/data/data_loader.h"
#include "distill/data/dataset.h"
#include "distill/procs/training_context.h"
#include "hooks/forward_hook_manager.h"
#include "hooks/io_dict.h"
#include "hooks/model.h"
#include "memdiag/inventory.h"
#include "memdiag/leak_detection.h"

namespace c10d {
class ProcessGroup;
}  // namespace c10d

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace kd {
namespace boxes_internal {

// Sets requires_grad on `model`'s parameters: `config.requires_grad` (else `default_value`),
// false under `frozen_modules`. Errors name `role`.frozen_modules and the unknown path.
absl::Status SetRequiresGrad(Model& model, const StageModelConfig& config, bool default_value,
                             const char* role);

// The loader of `loader` over its dataset in `datasets` (the shard of `rank` of `num_replicas`
// processes: DistributedSampler's for training, an exact partition with `exact_shards` for
// evaluation); errors name `field`.
absl::StatusOr<std::unique_ptr<DataLoader>> MakeLoader(
    const LoaderConfig& loader, const std::map<std::string, std::shared_ptr<Dataset>>& datasets,
    int64_t seed, const char* field, int64_t num_replicas = 1, int64_t rank = 0,
    bool exact_shards = false);

// The optimizer's parameter groups: without `param_groups`, one group of everything that
// trains (the student, the teacher when `teacher_trains`); with them, as torchdistill's
// module-wise params, only the listed modules' trainable parameters, one group each. `own`
// (the losses' parameters, FitNet's regressor, and the auxiliary modules') forms a last group
// with the optimizer's kwargs. `teacher` may be null.
absl::StatusOr<std::vector<ParamGroup>> BuildParamGroups(const OptimizerConfig& optimizer,
                                                         Model* student, Model* teacher,
                                                         bool teacher_trains,
                                                         std::vector<at::Tensor> own);

// memdiag's leak detection for a stage's validation loop: the callback of `config` (evaluation
// on `device`) over roots naming the student's and teacher's parameters, gradients and buffers
// and the optimizer's state; its log goes to stderr. Errors name the config field.
struct LeakDetection {
  std::unique_ptr<MemoryRoots> roots;
  std::unique_ptr<MemoryLeakDetectionCallback> callback;
};
absl::StatusOr<LeakDetection> MakeLeakDetection(const MemoryLeakDetectionConfig& config,
                                                c10::Device device, const Model& student,
                                                const Model* teacher,
                                                const torch::optim::Optimizer& optimizer);

// Clears `hooks` and sets the forward hooks `config` names on `model` (null: none); errors name
// `role`.
absl::Status AddStageHooks(ForwardHookManager& hooks, Model* model, const StageModelConfig& config,
                           const char* role);

// An auxiliary module of a stage (StageModelConfig.auxiliary_modules): built from the registry,
// run on a recorded value of its model after that model's forward.
struct AuxModule {
  std::string name;  // "student.connector" in messages and checkpoints
  ModelRole role;
  std::vector<IoRef> inputs;  // AuxiliaryModuleConfig.input, then its extra_inputs
  std::string io_name;  // its name in the I/O dict
  torch::nn::AnyModule module;
  std::string ckpt;    // AuxiliaryModuleConfig.ckpt (resolved), or empty
  bool trains = true;  // AuxiliaryModuleConfig.requires_grad
};

// The module's parameters and buffers by name, written to `aux.ckpt` atomically (nothing
// without one).
absl::Status SaveAuxiliaryCheckpoint(const AuxModule& aux);

// Appends `config`'s auxiliary modules (of `role`, named "<role_name>.<name>") to `modules`,
// on `device`; errors name the field.
absl::Status AddAuxiliaryModules(const StageModelConfig& config, ModelRole role,
                                 const char* role_name, c10::Device device,
                                 std::vector<AuxModule>& modules);

// Runs `role`'s modules on their inputs in `io`, recording their outputs there, in train mode
// if `training` (with grad: they may train while their model does not); a teacher's module that
// does not train runs in eval mode, as torchdistill runs a teacher with nothing to update.
absl::Status RunAuxiliaryModules(ModelRole role, bool training, std::vector<AuxModule>& modules,
                                 IoDict& io);

// The modules' parameters and buffers as "student.connector.0.weight" (checkpoints).
std::vector<std::pair<std::string, at::Tensor>> AuxTensors(const std::vector<AuxModule>& modules);

// The samples in `batch` (its targets' first dimension; 0 without targets).
int64_t BatchSize(const Batch& batch);

// A model's output as the tensor the criterion reads; InvalidArgument naming `role` otherwise.
absl::StatusOr<at::Tensor> OutputTensor(const c10::IValue& output, const char* role);

// Bytes (a serialized archive) as a uint8 tensor a checkpoint dict can hold, and back.
at::Tensor BytesTensor(const std::string& bytes);
std::string TensorBytes(const at::Tensor& t);

using NamedMetrics = std::vector<std::pair<std::string, std::unique_ptr<Metric>>>;

// Replaces this rank's evaluation sums (the loss's, the samples', every metric's Sums()) with
// their totals over `group`'s ranks: one allreduce of float64 sums on `device` (exact for
// counts below 2^53). Throws c10::Error when the collective fails.
void AddAcrossRanks(c10d::ProcessGroup& group, c10::Device device, double& loss_sum, int64_t& count,
                    const NamedMetrics& metrics);

}  // namespace boxes_internal
}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_INTERNAL_STAGE_SETUP_H_
