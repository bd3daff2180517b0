#include "distill/boxes/internal/stage_setup.h"

#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/nn/modules/container/any.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "distill/boxes/aux_modules.h"
#include "distill/boxes/internal/stage.h"
#include "distill/boxes/io_util.h"
#include "distill/boxes/memory_roots.h"
#include "distill/config/kwargs.h"
#include "distill/data/sampler.h"
#include "distill/losses/criterion.h"
#include "hooks/native_model.h"

namespace kd {
namespace boxes_internal {

absl::Status SetRequiresGrad(Model& model, const StageModelConfig& config, bool default_value,
                             const char* role) {
  const bool trains = config.has_requires_grad() ? config.requires_grad() : default_value;
  for (const std::string& path : config.frozen_modules()) {
    if (absl::Status found = model.CheckModulePath(path); !found.ok()) {
      return WithContext(absl::StrCat(role, ".frozen_modules"), found);
    }
  }
  for (const auto& [name, p] : model.NamedParameters()) {
    bool frozen = !trains;
    for (const std::string& path : config.frozen_modules()) {
      if (path.empty() || name.rfind(path + ".", 0) == 0) frozen = true;
    }
    at::Tensor param = p;
    param.requires_grad_(!frozen);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DataLoader>> MakeLoader(
    const LoaderConfig& loader, const std::map<std::string, std::shared_ptr<Dataset>>& datasets,
    int64_t seed, const char* field, int64_t num_replicas, int64_t rank, bool exact_shards) {
  auto it = datasets.find(loader.dataset_id());
  if (it == datasets.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": no dataset \"", loader.dataset_id(), "\""));
  }
  DataLoaderOptions options;
  options.batch_size = loader.batch_size();
  options.shuffle = loader.shuffle();
  options.drop_last = loader.drop_last();
  options.num_workers = loader.num_workers();
  if (loader.has_sampler()) {
    const PluginConfig& sampler = loader.sampler();
    const std::string owner = absl::StrCat("sampler \"", sampler.key(), "\"");
    KD_ASSIGN_OR_RETURN(Kwargs kwargs,
                        PluginKwargs(SamplerRegistry(), sampler.key(), sampler.kwargs(), owner));
    absl::StatusOr<std::shared_ptr<const Sampler>> made = MakeSampler(sampler.key(), kwargs);
    if (!made.ok()) return WithContext(absl::StrCat(field, ".sampler"), made.status());
    options.sampler = *std::move(made);
  }
  options.seed = static_cast<uint64_t>(seed);
  options.num_replicas = num_replicas;
  options.rank = rank;
  options.exact_shards = exact_shards;
  absl::StatusOr<DataLoader> created = DataLoader::Create(it->second, options);
  if (!created.ok()) return WithContext(field, created.status());
  return std::make_unique<DataLoader>(*std::move(created));
}

absl::StatusOr<std::vector<ParamGroup>> BuildParamGroups(const OptimizerConfig& optimizer,
                                                         Model* student, Model* teacher,
                                                         bool teacher_trains,
                                                         std::vector<at::Tensor> own) {
  std::vector<ParamGroup> groups;
  if (optimizer.param_groups().empty()) {
    groups.emplace_back();
    for (Model* model : {student, teacher_trains ? teacher : nullptr}) {
      if (model == nullptr) continue;
      for (const auto& [name, p] : model->NamedParameters()) {
        if (p.requires_grad()) groups[0].params.push_back(p);
      }
    }
  }
  for (int i = 0; i < optimizer.param_groups_size(); ++i) {
    const ParamGroupConfig& config = optimizer.param_groups(i);
    const std::string field = absl::StrCat("optimizer.param_groups[", i, "]");
    const bool of_teacher = config.model() == ParamGroupConfig::TEACHER;
    Model* model = of_teacher ? teacher : student;
    if (model == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": a parameter group of the teacher, but the run has none"));
    }
    if (absl::Status found = model->CheckModulePath(config.module_path()); !found.ok()) {
      return WithContext(field, found);
    }
    ParamGroup group;
    const std::string& path = config.module_path();
    for (const auto& [name, p] : model->NamedParameters()) {
      if (p.requires_grad() && (path.empty() || name.rfind(path + ".", 0) == 0)) {
        group.params.push_back(p);
      }
    }
    absl::StatusOr<Kwargs> kwargs = KwargsFromConfig(
        config.kwargs(), std::nullopt, absl::StrCat("optimizer \"", optimizer.key(), "\""));
    if (!kwargs.ok()) return WithContext(field, kwargs.status());
    group.kwargs = *std::move(kwargs);
    if (group.params.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": module \"", path, "\" of the ", of_teacher ? "teacher" : "student",
          " has no trainable parameters (frozen, or requires_grad false for the model)"));
    }
    groups.push_back(std::move(group));
  }
  if (!own.empty()) {
    // Only modules beside the models train (a stage that trains an auxiliary module alone, as
    // factor transfer's paraphraser stage): they are the one default group.
    if (optimizer.param_groups().empty() && groups[0].params.empty()) {
      groups[0].params = std::move(own);
    } else {
      groups.push_back({std::move(own), {}});
    }
  }
  return groups;
}

namespace {

MemoryLeakDetectionOptions LeakDetectionOptions(const MemoryLeakDetectionConfig& config,
                                                c10::Device device) {
  MemoryLeakDetectionOptions options;
  if (config.diff_between_batches_size() == 2) {
    options.diff_between_batches =
        std::pair(config.diff_between_batches(0), config.diff_between_batches(1));
  }
  if (config.has_snapshot_at_batch()) options.snapshot_at_batch = config.snapshot_at_batch();
  options.snapshot_path = config.snapshot_path();
  options.log_every_n_batches = config.log_every_n_batches();
  if (config.has_log_first_n_batches()) options.log_first_n_batches = config.log_first_n_batches();
  if (config.has_max_diff_buckets()) options.max_diff_buckets = config.max_diff_buckets();
  options.device = device;
  return options;
}

}  // namespace

absl::StatusOr<LeakDetection> MakeLeakDetection(const MemoryLeakDetectionConfig& config,
                                                c10::Device device, const Model& student,
                                                const Model* teacher,
                                                const torch::optim::Optimizer& optimizer) {
  LeakDetection out;
  out.roots = std::make_unique<MemoryRoots>();
  AddModelRoots(*out.roots, "student", student);
  if (teacher != nullptr) AddModelRoots(*out.roots, "teacher", *teacher);
  AddOptimizerRoots(*out.roots, "optimizer", optimizer);
  absl::StatusOr<std::unique_ptr<MemoryLeakDetectionCallback>> made =
      MemoryLeakDetectionCallback::Create(LeakDetectionOptions(config, device), out.roots.get(),
                                          &std::cerr);
  if (!made.ok()) return WithContext("evaluation.memory_leak_detection", made.status());
  out.callback = *std::move(made);
  return out;
}

absl::Status AddStageHooks(ForwardHookManager& hooks, Model* model, const StageModelConfig& config,
                           const char* role) {
  hooks.Clear();
  if (model == nullptr) return absl::OkStatus();
  if (absl::Status set = SetHooks(hooks, *model, config); !set.ok()) return WithContext(role, set);
  return absl::OkStatus();
}

// `module` as a kd::Model, for its state files: Model::SaveState / LoadState write and read
// the dict name -> tensor torch.save(module.state_dict()) does, with their checks and messages.
// Its forward is never called.
static std::unique_ptr<Model> StateView(const torch::nn::AnyModule& module) {
  return MakeNativeModel(module.ptr(), [](std::vector<c10::IValue>&, const Kwargs&) -> c10::IValue {
    TORCH_CHECK(false, "an auxiliary module's state view has no forward");
  });
}

static std::vector<IoRef> Inputs(const AuxiliaryModuleConfig& aux) {
  std::vector<IoRef> inputs = {aux.input()};
  inputs.insert(inputs.end(), aux.extra_inputs().begin(), aux.extra_inputs().end());
  return inputs;
}

absl::Status AddAuxiliaryModules(const StageModelConfig& config, ModelRole role,
                                 const char* role_name, c10::Device device,
                                 std::vector<AuxModule>& modules) {
  for (int i = 0; i < config.auxiliary_modules_size(); ++i) {
    const AuxiliaryModuleConfig& aux = config.auxiliary_modules(i);
    const std::string field = absl::StrCat(role_name, ".auxiliary_modules[", i, "]");
    absl::StatusOr<Kwargs> kwargs =
        PluginKwargs(AuxiliaryModuleRegistry(), aux.key(), aux.kwargs(),
                     absl::StrCat("auxiliary_module \"", aux.key(), "\""));
    if (!kwargs.ok()) return WithContext(field, kwargs.status());
    absl::StatusOr<torch::nn::AnyModule> module = MakeAuxiliaryModule(aux.key(), *kwargs);
    if (!module.ok()) return WithContext(field, module.status());
    module->ptr()->to(device);
    if (!aux.ckpt().empty() && std::filesystem::exists(aux.ckpt())) {
      const absl::Status loaded = StateView(*module)->LoadState(aux.ckpt());
      if (!loaded.ok()) return WithContext(absl::StrCat(field, ".ckpt"), loaded);
    }
    const bool trains = !aux.has_requires_grad() || aux.requires_grad();
    for (at::Tensor& p : module->ptr()->parameters()) p.requires_grad_(trains);
    modules.push_back({.name = absl::StrCat(role_name, ".", aux.name()),
                       .role = role,
                       .inputs = Inputs(aux),
                       .io_name = aux.name(),
                       .module = *std::move(module),
                       .ckpt = aux.ckpt(),
                       .trains = trains});
  }
  return absl::OkStatus();
}

absl::Status SaveAuxiliaryCheckpoint(const AuxModule& aux) {
  if (aux.ckpt.empty()) return absl::OkStatus();
  const std::filesystem::path parent = std::filesystem::path(aux.ckpt).parent_path();
  std::error_code error;  // a folder that cannot be made: WriteTorchFile names the file
  if (!parent.empty()) std::filesystem::create_directories(parent, error);
  return StateView(aux.module)->SaveState(aux.ckpt);
}

// An auxiliary module's output as the I/O dict holds it: a tensor, or a pair of tensors as a
// tuple (VID's regressor: mean and variance). Throws for anything else.
static c10::IValue AuxOutput(torch::nn::AnyValue value) {
  if (const at::Tensor* tensor = value.try_get<at::Tensor>()) return *tensor;
  if (const auto* pair = value.try_get<std::tuple<at::Tensor, at::Tensor>>()) {
    return c10::ivalue::Tuple::create({std::get<0>(*pair), std::get<1>(*pair)});
  }
  TORCH_CHECK(false, "an auxiliary module returns a tensor or a pair of tensors, not ",
              c10::demangle(value.type_info().name()));
}

// Runs `role`'s auxiliary modules on their inputs in `io`, recording their outputs there, in
// the student's train/eval mode (with grad: they may train while their model does not).
absl::Status RunAuxiliaryModules(ModelRole role, bool training, std::vector<AuxModule>& modules,
                                 IoDict& io) {
  for (AuxModule& aux : modules) {
    if (aux.role != role) continue;
    std::vector<at::Tensor> in;
    for (const IoRef& ref : aux.inputs) {
      absl::StatusOr<at::Tensor> value = RecordedTensor(io, ref);
      if (!value.ok()) return WithContext(aux.name, value.status());
      in.push_back(*std::move(value));
    }
    aux.module.ptr()->train(training && (aux.role == ModelRole::kStudent || aux.trains));
    // AnyModule's forward is typed by its arity (the validator allows one to three inputs).
    absl::StatusOr<c10::IValue> out = CallTorch(
        [&] {
          switch (in.size()) {
            case 1:
              return AuxOutput(aux.module.any_forward(in[0]));
            case 2:
              return AuxOutput(aux.module.any_forward(in[0], in[1]));
            default:
              TORCH_CHECK(in.size() == 3, "an auxiliary module takes one to three inputs");
              return AuxOutput(aux.module.any_forward(in[0], in[1], in[2]));
          }
        },
        absl::StatusCode::kInvalidArgument);
    if (!out.ok()) return WithContext(aux.name, out.status());
    io[aux.io_name][kOutput] = *std::move(out);
  }
  return absl::OkStatus();
}

// The auxiliary modules' parameters and buffers as "student.connector.0.weight".
std::vector<std::pair<std::string, at::Tensor>> AuxTensors(const std::vector<AuxModule>& modules) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const AuxModule& aux : modules) {
    for (const auto& item : aux.module.ptr()->named_parameters()) {
      out.emplace_back(absl::StrCat(aux.name, ".", item.key()), item.value());
    }
    for (const auto& item : aux.module.ptr()->named_buffers()) {
      out.emplace_back(absl::StrCat(aux.name, ".", item.key()), item.value());
    }
  }
  return out;
}

int64_t BatchSize(const Batch& batch) {
  return batch.targets.isTensor() ? batch.targets.toTensor().size(0) : 0;
}

absl::StatusOr<at::Tensor> OutputTensor(const c10::IValue& output, const char* role) {
  if (output.isTensor()) return output.toTensor();
  if (output.isGenericDict()) {  // Hugging Face's {"logits": ..., ...}
    const c10::impl::GenericDict dict = output.toGenericDict();
    const auto logits = dict.find("logits");
    return logits != dict.end() && logits->value().isTensor() ? logits->value().toTensor()
                                                              : at::Tensor();  // by key only
  }
  if (output.isTuple() || output.isList()) return at::Tensor();  // read by element only
  return absl::InvalidArgumentError(
      absl::StrCat("the ", role, "'s output is a ", output.tagKind(),
                   "; the criterion reads tensors, dicts of them (IoRef.key) and tuples "
                   "(IoRef.element)"));
}

at::Tensor BytesTensor(const std::string& bytes) {
  at::Tensor t = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());  // else null
  return t;
}

std::string TensorBytes(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel());
}

void AddAcrossRanks(c10d::ProcessGroup& group, c10::Device device, double& loss_sum, int64_t& count,
                    const NamedMetrics& metrics) {
  std::vector<double> sums = {loss_sum, static_cast<double>(count)};
  std::vector<size_t> sizes;  // each metric's number of sums
  for (const auto& [name, metric] : metrics) {
    const std::vector<double> own = metric->Sums();
    sums.insert(sums.end(), own.begin(), own.end());
    sizes.push_back(own.size());
  }
  // Gloo reduces CPU tensors, NCCL device ones.
  std::vector<at::Tensor> tensors = {
      at::tensor(sums, at::kDouble).to(device.is_cuda() ? device : c10::Device(c10::kCPU))};
  group.allreduce(tensors)->wait();
  const at::Tensor total = tensors[0].cpu();
  const double* t = total.const_data_ptr<double>();
  loss_sum = t[0];
  count = static_cast<int64_t>(t[1]);
  size_t at = 2;
  for (size_t i = 0; i < metrics.size(); ++i) {
    metrics[i].second->SetSums(std::vector<double>(t + at, t + at + sizes[i]));
    at += sizes[i];
  }
}

}  // namespace boxes_internal
}  // namespace kd
