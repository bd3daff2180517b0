// A program's own dataset class and models handed to the boxes (kd::BoxInputs, torchdistill's
// get_distillation_box over the script's objects), each box driven by the step API from the
// program's own loop with its own evaluation every epoch. First a teacher is trained (a
// TrainingBox), then a student is distilled from it as torchdistill's FitNets config does, in
// two stages: a hint stage on the student and the teacher trimmed to their bodies (`sequential`),
// a regressor mapping the student's hint to the teacher's, then KD on the whole models. (The
// script itself, flag for flag, over a config's datasets and models: image_classification.cc.)
// examples/README.md puts the Python beside it.
//
//   bazel run -c opt //examples:own_objects
//
// Exits 1 when the distilled student's accuracy on the script's validation set is not above
// 0.6 (the task: four overlapping Gaussian blobs, chance 0.25; the teacher reaches about 0.70).
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "distill/boxes/box.h"
#include "distill/config/config_loader.h"
#include "distill/data/data_loader.h"
#include "distill/data/dataset.h"
#include "hooks/hook_point.h"
#include "hooks/native_model.h"

namespace {

constexpr int64_t kClasses = 4, kFeatures = 16;

// The script's own dataset (not registered): `n` points of `kClasses` Gaussian blobs in
// kFeatures dimensions, as (1, 1, kFeatures) "images"; `seed` draws the points.
class Blobs final : public kd::Dataset {
 public:
  Blobs(int64_t n, uint64_t seed) {
    // One set of centers for every split; the points around them from `seed`.
    at::Generator centers_generator = at::detail::createCPUGenerator(0);
    const at::Tensor centers = at::randn({kClasses, kFeatures}, centers_generator) * 0.4;
    at::Generator generator = at::detail::createCPUGenerator(seed);
    targets_ = at::arange(n, at::kLong).remainder_(kClasses);
    samples_ = (centers.index_select(0, targets_) + at::randn({n, kFeatures}, generator))
                   .reshape({n, 1, 1, kFeatures});
  }
  int64_t size() const override { return samples_.size(0); }
  int64_t num_classes() const override { return kClasses; }
  const at::Tensor& samples() const { return samples_; }
  const at::Tensor& targets() const { return targets_; }

 protected:
  Samples GetSamples(const at::Tensor& indices, at::Generator&) const override {
    return {samples_.index_select(0, indices), targets_.index_select(0, indices)};
  }

 private:
  at::Tensor samples_, targets_;
};

// The script's own models: an MLP of `hidden` units, its body (flatten, linear, ReLU: the hint
// layer) and its head. Children run through hook points (kd::Call, kd::HookedSequential), so
// the boxes can hook them and trim the model to its body.
struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(int64_t hidden)
      : body(register_module(
            "body", kd::HookedSequential(torch::nn::Flatten(), torch::nn::Linear(kFeatures, hidden),
                                         torch::nn::ReLU()))),
        head(register_module("head", torch::nn::Linear(hidden, kClasses))) {}
  at::Tensor forward(at::Tensor x) { return kd::Call(head, kd::Call(body, x)); }
  kd::HookedSequential body;
  torch::nn::Linear head;
};
TORCH_MODULE(Mlp);

// The stages: the models and datasets come from the script, everything else from here. The
// script's loaders and optimizer (a later stage inherits what it leaves unset), then the
// teacher's cross-entropy stage.
constexpr char kLoadersAndOptimizer[] = R"pb(
  train_data_loader { dataset_id: "train" batch_size: 32 shuffle: true }
  val_data_loader { dataset_id: "val" batch_size: 128 }
  optimizer {
    key: "SGD"
    kwargs { name: "lr" number: 0.05 }
    kwargs { name: "momentum" number: 0.9 }
  }
)pb";

constexpr char kCrossEntropy[] = R"pb(
  criterion {
    terms {
      key: "CrossEntropyLoss"
      inputs { arg: "input" source: STUDENT }
      inputs { arg: "target" source: TARGETS }
    }
  }
)pb";

// FitNets' hint stage: both models trimmed to their bodies; a regressor (8 -> 64) on the
// student's hint, an L2 loss to the teacher's; the trimmed student's weights written at the end.
constexpr char kHintStage[] = R"pb(
  name: "hint"
  num_epochs: 2
  teacher {
    sequential: "body"
    forward_hooks { module_path: "body" requires_output: true }
  }
  student {
    sequential: "body"
    forward_hooks { module_path: "body" requires_output: true }
    auxiliary_modules {
      name: "regressor"
      key: "linear"
      kwargs { name: "in_features" integer: 8 }
      kwargs { name: "out_features" integer: 64 }
      input { source: STUDENT path: "body" }
    }
    dst_ckpt: "/tmp/libkd_example/student/hint_student.pt"
  }
  criterion {
    terms {
      key: "MSELoss"
      inputs { arg: "input" source: STUDENT path: "regressor" }
      inputs { arg: "target" source: TEACHER path: "body" }
    }
  }
)pb";

constexpr char kKdStage[] = R"pb(
  name: "kd"
  num_epochs: 2
  student { forward_hooks { module_path: "" requires_output: true } }
  criterion {
    terms {
      key: "KDLoss"
      kwargs { name: "temperature" number: 4 }
      kwargs { name: "alpha" number: 0.5 }
      inputs { arg: "student" source: STUDENT }
      inputs { arg: "teacher" source: TEACHER }
      inputs { arg: "targets" source: TARGETS }
    }
  }
)pb";

std::string TeacherConfig() {
  return absl::StrCat(R"pb(run { name: "teacher" seed: 1 }
                           train { name: "teacher" num_epochs: 3)pb",
                      kLoadersAndOptimizer, kCrossEntropy, "}");
}

std::string StudentConfig() {
  return absl::StrCat(R"pb(run { name: "student" seed: 2 }
                           stages {)pb",
                      kLoadersAndOptimizer, kHintStage, "} stages {", kKdStage, "}");
}

// The script's own evaluation: top-1 accuracy of `model` on `data`.
double Accuracy(kd::Model& model, const Blobs& data) {
  const bool was_training = model.is_training();
  model.SetTraining(false);
  at::NoGradGuard no_grad;
  const at::Tensor logits = model.Forward({data.samples()}).toTensor();
  model.SetTraining(was_training);
  return logits.argmax(1).eq(data.targets()).to(at::kDouble).mean().item<double>();
}

// The script's train loop, torchdistill's line for line: the run's epochs, pre_epoch_process,
// forward_process + post_forward_process per batch, evaluate, post_epoch_process (which moves
// to the next stage after a stage's last epoch).
absl::Status Train(kd::Box& box, const Blobs& val, const char* who) {
  for (int64_t epoch = 0; epoch < box.num_epochs(); ++epoch) {
    KD_RETURN_IF_ERROR(box.PreEpoch(epoch));
    KD_ASSIGN_OR_RETURN(kd::DataLoader * loader, box.TrainLoader());
    double loss_sum = 0;
    int64_t steps = 0;
    for (kd::BatchStream batches(*loader); !batches.done(); ++steps) {
      kd::Batch batch = batches.Next();
      KD_RETURN_IF_ERROR(box.PreForward(batch));
      KD_ASSIGN_OR_RETURN(at::Tensor loss, box.Forward(batch));
      loss_sum += loss.item<double>();
      KD_RETURN_IF_ERROR(box.PostForward(loss));
    }
    const double accuracy = Accuracy(box.student(), val);
    std::printf("%s stage %zu epoch %lld: train loss %.4f, val accuracy %.4f\n", who,
                box.stage_index(), static_cast<long long>(epoch + 1),
                loss_sum / static_cast<double>(steps), accuracy);
    KD_RETURN_IF_ERROR(box.PostEpoch({{"accuracy", accuracy}}));
  }
  return absl::OkStatus();
}

absl::StatusOr<kd::BoxInputs> Inputs(std::unique_ptr<kd::Model> student,
                                     std::unique_ptr<kd::Model> teacher,
                                     const std::shared_ptr<Blobs>& train,
                                     const std::shared_ptr<Blobs>& val) {
  kd::BoxInputs inputs;
  inputs.student = std::move(student);
  inputs.teacher = std::move(teacher);
  inputs.datasets = {{"train", train}, {"val", val}};
  return inputs;
}

absl::Status Main() {
  at::set_num_threads(1);
  at::manual_seed(0);
  const auto train = std::make_shared<Blobs>(1024, /*seed=*/7);
  const auto val = std::make_shared<Blobs>(512, /*seed=*/7 + 1);

  // The teacher: trained here by a TrainingBox (the Python script loads a pretrained one).
  Mlp teacher_net(64);
  KD_ASSIGN_OR_RETURN(kd::LoadedConfig teacher_config, kd::ParseConfig(TeacherConfig(), "teacher"));
  KD_ASSIGN_OR_RETURN(kd::BoxInputs teacher_inputs,
                      Inputs(kd::MakeNativeModel(teacher_net.ptr()), nullptr, train, val));
  KD_ASSIGN_OR_RETURN(std::unique_ptr<kd::Box> teacher_box,
                      kd::MakeBox(teacher_config.config, std::move(teacher_inputs),
                                  {.run_dir = "/tmp/libkd_example/teacher", .overwrite = true}));
  KD_RETURN_IF_ERROR(Train(*teacher_box, *val, "teacher"));

  // The student, distilled from it in two stages (FitNets: hint, then KD).
  Mlp student_net(8);
  KD_ASSIGN_OR_RETURN(kd::LoadedConfig student_config, kd::ParseConfig(StudentConfig(), "student"));
  KD_ASSIGN_OR_RETURN(kd::BoxInputs student_inputs,
                      Inputs(kd::MakeNativeModel(student_net.ptr()),
                             kd::MakeNativeModel(teacher_net.ptr()), train, val));
  KD_ASSIGN_OR_RETURN(std::unique_ptr<kd::Box> box,
                      kd::MakeBox(student_config.config, std::move(student_inputs),
                                  {.run_dir = "/tmp/libkd_example/student", .overwrite = true}));
  std::printf("%s\n", box->kind().c_str());
  KD_RETURN_IF_ERROR(Train(*box, *val, "student"));
  const double accuracy = Accuracy(box->student(), *val);
  if (accuracy <= 0.6) {
    return absl::InternalError(
        absl::StrCat("the distilled student's accuracy is ", accuracy, ", not above 0.6"));
  }
  return absl::OkStatus();
}

}  // namespace

int main() {
  const absl::Status status = Main();
  if (!status.ok()) {
    std::fprintf(stderr, "image_classification: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
