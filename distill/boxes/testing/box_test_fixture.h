// The boxes' tests' configs and helpers: a synthetic task, MLP student and teacher, a stage with
// a cross-entropy or KD criterion, run directories, checkpoint comparison.
#ifndef LIBKD_DISTILL_BOXES_TESTING_BOX_TEST_FIXTURE_H_
#define LIBKD_DISTILL_BOXES_TESTING_BOX_TEST_FIXTURE_H_

#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "distill/boxes/box.h"
#include "distill/config/distill_config.pb.h"
#include "gtest/gtest.h"

namespace kd {
namespace test {

// Parts of the boxes' test configs. A classification task a small MLP learns in a few epochs.
inline constexpr char kData[] = R"pb(
  run { name: "t" seed: 3 log_every_n_steps: 4 }
  datasets {
    id: "train"
    key: "synthetic"
    kwargs { name: "num_samples" integer: 256 }
    kwargs { name: "num_classes" integer: 4 }
    kwargs { name: "height" integer: 6 }
    kwargs { name: "width" integer: 6 }
    kwargs { name: "seed" integer: 1 }
  }
  datasets {
    id: "val"
    key: "synthetic"
    kwargs { name: "num_samples" integer: 128 }
    kwargs { name: "num_classes" integer: 4 }
    kwargs { name: "height" integer: 6 }
    kwargs { name: "width" integer: 6 }
    kwargs { name: "seed" integer: 1 }
  }
  evaluation { metrics { key: "accuracy" } }
)pb";

inline constexpr char kStudent[] = R"pb(
  student {
    native {
      key: "mlp"
      kwargs { name: "in_features" integer: 36 }
      kwargs {
        name: "hidden"
        integers { values: [ 16 ] }
      }
      kwargs { name: "num_classes" integer: 4 }
    }
  }
)pb";

inline constexpr char kTeacher[] = R"pb(
  teacher {
    native {
      key: "mlp"
      kwargs { name: "in_features" integer: 36 }
      kwargs {
        name: "hidden"
        integers { values: [ 32 ] }
      }
      kwargs { name: "num_classes" integer: 4 }
    }
  }
)pb";

// The text of a stage (without its braces) named `name`, of `epochs` epochs: loaders of "train"
// (batch 32, shuffled) and "val" (64), SGD (lr 0.1, momentum 0.9), MultiStepLR at epoch 2, and
// `loss` (kCe or kKd).
std::string Stage(const std::string& name, int epochs, const std::string& loss);

inline constexpr char kCe[] = R"pb(
  criterion {
    terms {
      key: "CrossEntropyLoss"
      inputs { arg: "input" source: STUDENT }
      inputs { arg: "target" source: TARGETS }
    }
  }
)pb";

inline constexpr char kKd[] = R"pb(
  student { forward_hooks { module_path: "" requires_output: true } }
  criterion {
    terms {
      key: "KDLoss"
      kwargs { name: "temperature" number: 2 }
      kwargs { name: "alpha" number: 0.5 }
      inputs { arg: "student" source: STUDENT }
      inputs { arg: "teacher" source: TEACHER }
      inputs { arg: "targets" source: TARGETS }
    }
  }
)pb";

// torchdistill's FitNets: a hint stage on the teacher and the student trimmed to their first
// layers (`sequential`), a connector regressing the student's hint onto the teacher's (L2), then KD
// on the whole models. fashion_cnn on 28x28 images: stem, layer1, layer2, head.
inline constexpr char kImages[] = R"pb(
  run { name: "t" seed: 3 log_every_n_steps: 4 }
  datasets {
    id: "train"
    key: "synthetic"
    kwargs { name: "num_samples" integer: 96 }
    kwargs { name: "num_classes" integer: 4 }
    kwargs { name: "seed" integer: 1 }
  }
  datasets {
    id: "val"
    key: "synthetic"
    kwargs { name: "num_samples" integer: 64 }
    kwargs { name: "num_classes" integer: 4 }
    kwargs { name: "seed" integer: 1 }
  }
  teacher {
    native {
      key: "fashion_cnn"
      kwargs { name: "width" integer: 8 }
      kwargs { name: "num_classes" integer: 4 }
    }
  }
  student {
    native {
      key: "fashion_cnn"
      kwargs { name: "width" integer: 4 }
      kwargs { name: "num_classes" integer: 4 }
    }
  }
  evaluation { metrics { key: "accuracy" } }
)pb";

// The hint stage of FitNets (the text of a stage without its braces), writing the student's
// trimmed model to `student_dst`.
std::string HintStage(const std::string& student_dst);

// kImages with the hint stage (2 epochs) and a KD stage (1 epoch) on the whole models.
std::string FitNetConfig(const std::string& student_dst);

// A token file for "token_file" datasets, in the test's temporary folder: `tokens` uint16 ids
// below `vocab` in runs of `run`, each run starting at a pseudo-random id (from `seed`) and
// following id -> (mul * id + add) mod vocab, so a small LM learns all but a run's first token.
struct RuleTokens {
  int64_t vocab = 32;
  int64_t run = 8;
  int64_t mul = 3;
  int64_t add = 1;
};
std::string WriteRuleTokens(const std::string& name, int64_t tokens, uint32_t seed,
                            const RuleTokens& rule = {});

// `text` parsed as a DistillConfig (a failed parse fails the test).
DistillConfig Parse(const std::string& text);

// An empty run directory of the test's own, named `name`.
std::string RunDir(const std::string& name);

// The students of two runs' last checkpoints are equal, bit for bit.
void ExpectSameStudent(const std::string& dir_a, const std::string& dir_b);

// Runs `config` in `dir` for two epochs' worth (as it says) and expects the exact teacher cache
// to have been on from the first epoch and to have served hits in the second (its reports, one
// per epoch; a box that cannot be made or run fails the test).
void ExpectTeacherCacheServesSecondEpoch(const DistillConfig& config, const std::string& dir);

// The student's tensor `name` ("fc.weight") in the last checkpoint of the run in `dir`.
at::Tensor LastStudentTensor(const std::string& dir, const std::string& name);

// Expects the auxiliary module `prefix` ("teacher.paraphraser.") in run checkpoint
// `checkpoint` to hold what its own checkpoint file `file` holds, tensor for tensor; returns
// how many it compared.
int ExpectAuxModuleIsFile(const std::string& checkpoint, const std::string& prefix,
                          const std::string& file);

// torchdistill's image-classification loop over `box`, line for line (examples/torchvision/
// image_classification.py's train(): `for epoch in range(start, box.num_epochs)`), validation
// each epoch: PostEpoch moves on to the next stage after a stage's last epoch.
// `end`: the epoch the loop stops before (a run that was stopped), -1: the run's end.
absl::Status HandLoop(Box& box, int64_t end = -1);

// Run's last checkpoint and the hand-driven box's student agree bit for bit.
void ExpectHandLoopEqualsRun(const std::string& text, const std::string& name);

// One thread, as the boxes' results are compared bit for bit.
class BoxTest : public ::testing::Test {
 protected:
  void SetUp() override;  // one thread
};

}  // namespace test
}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_TESTING_BOX_TEST_FIXTURE_H_
