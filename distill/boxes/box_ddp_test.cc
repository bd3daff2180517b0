// A TrainingBox in a 2-process run on loopback (the test binary started again as the ranks,
// with torchrun's environment): the student wrapped in DISTRIBUTED_DATA_PARALLEL ends with the
// same parameters on both ranks, equal (atol 1e-5) to one process training on the same global
// batches; only rank 0 writes checkpoints.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/cuda.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/torch_file.h"
#include "distill/boxes/box.h"
#include "distill/boxes/distributed/ddp.h"
#include "distill/procs/proc_func.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

namespace fs = std::filesystem;

using ::testing::HasSubstr;
using ::testing::StartsWith;

// clang-format off (clang-format reflows text-proto raw strings)
// The training data of every config here: 256 synthetic samples of 4 classes.
constexpr char kTrainData[] = R"(
datasets {
  id: "train"
  key: "synthetic"
  kwargs { name: "num_samples" integer: 256 }
  kwargs { name: "num_classes" integer: 4 }
  kwargs { name: "height" integer: 6 }
  kwargs { name: "width" integer: 6 }
}
)";

// 256 synthetic samples; `batch` per process; wrapper DDP (it does nothing in one process).
std::string Config(int batch, const std::string& dst, int epochs = 2) {
  return absl::StrCat(R"(
run { name: "ddp" seed: 3 })", kTrainData, R"(
student {
  native {
    key: "mlp"
    kwargs { name: "in_features" integer: 36 }
    kwargs { name: "hidden" integers { values: [ 32 ] } }
    kwargs { name: "num_classes" integer: 4 }
  }
  dst_ckpt: ")",
                      dst, R"("
}
train {
  num_epochs: )",
                      epochs, R"(
  train_data_loader { dataset_id: "train" batch_size: )",
                      batch, R"( shuffle: true }
  student { wrapper: DISTRIBUTED_DATA_PARALLEL }
  optimizer { key: "SGD" kwargs { name: "lr" number: 0.1 } }
  criterion {
    terms {
      key: "CrossEntropyLoss"
      inputs { arg: "input" source: STUDENT }
      inputs { arg: "target" source: TARGETS }
    }
  }
})");
}

// `text` on the device LIBKD_BOX_DEVICE names (e.g. "cuda": each rank on cuda:LOCAL_RANK), or as
// it is.
std::string OnDevice(std::string text) {
  const char* device = std::getenv("LIBKD_BOX_DEVICE");
  if (device == nullptr) return text;
  const std::string run = "run { name: \"ddp\" seed: 3";
  return text.replace(text.find(run), run.size(), absl::StrCat(run, " device: \"", device, "\""));
}

// The text after which a stage's fields can be added.
constexpr char kTrain[] = "train {";

// Config() with validation and test loaders over 101 other samples (shards of 51 and 50) and
// accuracy as the metric.
std::string WithEvaluation(std::string text) {
  const size_t at = text.find(kTrain);
  EXPECT_NE(at, std::string::npos);
  text.insert(at + sizeof(kTrain) - 1, R"(
  val_data_loader { dataset_id: "val" batch_size: 16 })");
  return text + R"(
datasets {
  id: "val"
  key: "synthetic"
  kwargs { name: "num_samples" integer: 101 }
  kwargs { name: "num_classes" integer: 4 }
  kwargs { name: "height" integer: 6 }
  kwargs { name: "width" integer: 6 }
  kwargs { name: "seed" integer: 9 }
}
evaluation { metrics { key: "accuracy" } }
test_data_loader { dataset_id: "val" batch_size: 16 }
)";
}

// Config() with a pre-forward process function by which rank 1 dies at its third step.
std::string WithRankOneDying(std::string text) {
  const size_t at = text.find(kTrain);
  EXPECT_NE(at, std::string::npos);
  text.insert(at + sizeof(kTrain) - 1, R"(
  pre_forward_proc { key: "die_on_rank_1_at_step_3" })");
  return text;
}
// 256 synthetic samples, `batch` per process: a student whose auxiliary module "proj" maps its
// hidden features to the teacher's, and a teacher that trains too (an MSE hint between the two
// beside the student's cross-entropy), both wrapped in DDP. Final models in
// <dir>/aux_{student,teacher}_<tag>.pt.
std::string AuxConfig(int batch, const std::string& dir, const std::string& tag) {
  return absl::StrCat(R"(
run { name: "aux" seed: 3 })", kTrainData, R"(
teacher {
  native {
    key: "mlp"
    kwargs { name: "in_features" integer: 36 }
    kwargs { name: "hidden" integers { values: [ 16 ] } }
    kwargs { name: "num_classes" integer: 4 }
  }
  dst_ckpt: ")", dir, "/aux_teacher_", tag, R"(.pt"
}
student {
  native {
    key: "mlp"
    kwargs { name: "in_features" integer: 36 }
    kwargs { name: "hidden" integers { values: [ 32 ] } }
    kwargs { name: "num_classes" integer: 4 }
  }
  dst_ckpt: ")", dir, "/aux_student_", tag, R"(.pt"
}
train {
  num_epochs: 2
  train_data_loader { dataset_id: "train" batch_size: )", batch, R"( shuffle: true }
  teacher {
    requires_grad: true
    wrapper: DISTRIBUTED_DATA_PARALLEL
    find_unused_parameters: true  # its logits feed no loss: fc gets no gradient
    forward_hooks { module_path: "hidden.0" requires_output: true }
  }
  student {
    wrapper: DISTRIBUTED_DATA_PARALLEL
    forward_hooks { module_path: "hidden.0" requires_output: true }
    auxiliary_modules {
      name: "proj"
      key: "linear"
      kwargs { name: "in_features" integer: 32 }
      kwargs { name: "out_features" integer: 16 }
      input { source: STUDENT path: "hidden.0" }
    }
  }
  optimizer { key: "SGD" kwargs { name: "lr" number: 0.1 } }
  criterion {
    terms {
      key: "CrossEntropyLoss"
      inputs { arg: "input" source: STUDENT }
      inputs { arg: "target" source: TARGETS }
    }
    terms {
      key: "MSELoss"
      inputs { arg: "input" source: STUDENT path: "proj" }
      inputs { arg: "target" source: TEACHER path: "hidden.0" }
    }
  }
})");
}

// Config() with the student a TorchScript file whose parameter "unused" gets no gradient, and
// find_unused_parameters as given.
std::string WithUnusedParameter(std::string text, const std::string& student, bool find) {
  const size_t native = text.find("  native {");
  const size_t end = text.find("  dst_ckpt");
  EXPECT_NE(native, std::string::npos);
  text.replace(native, end - native, absl::StrCat("  torchscript: \"", student, "\"\n"));
  const std::string wrapper = "student { wrapper: DISTRIBUTED_DATA_PARALLEL }";
  text.replace(text.find(wrapper), wrapper.size(),
               absl::StrCat("student { wrapper: DISTRIBUTED_DATA_PARALLEL find_unused_parameters: ",
                            find ? "true" : "false", " }"));
  return text;
}
// clang-format on

absl::Status DieOnRankOneAtStepThree(TrainingContext&, Batch&, const Kwargs&) {
  static int calls = 0;
  if (++calls == 3 && std::string(std::getenv("RANK")) == "1") _exit(3);
  return absl::OkStatus();
}
KD_REGISTER_PROC_FUNC(PreForwardProc, "die_on_rank_1_at_step_3", DieOnRankOneAtStepThree, {});

absl::StatusOr<RunResult> RunBoxForResult(const std::string& text, const std::string& run_dir,
                                          bool resume = false) {
  DistillConfig config;
  if (!google::protobuf::TextFormat::ParseFromString(text, &config)) {
    return absl::InvalidArgumentError("bad config");
  }
  KD_ASSIGN_OR_RETURN(std::unique_ptr<Box> box,
                      MakeBox(config, {.run_dir = run_dir, .resume = resume}));
  return box->Run();
}

absl::Status RunBox(const std::string& text, const std::string& run_dir, bool resume = false) {
  return RunBoxForResult(text, run_dir, resume).status();
}

// "loss accuracy" of the validation and then of the test metrics, one line each, then the last
// epoch's training loss.
std::string MetricsText(const RunResult& result) {
  std::ostringstream out;
  out.precision(17);
  for (const auto* metrics : {&result.final_metrics, &result.test_metrics}) {
    out << metrics->at("loss") << " " << metrics->at("accuracy") << "\n";
  }
  out << result.epochs.back().train_loss << "\n";
  return out.str();
}

int Worker() {
  at::set_num_threads(1);
  const std::string dir = std::getenv("LIBKD_BOX_DIR");
  const std::string rank = std::getenv("RANK");
  absl::Status done;
  if (std::getenv("LIBKD_BOX_AUX") != nullptr) {
    done = RunBox(AuxConfig(16, dir, "rank" + rank), dir + "/aux_rank" + rank);
  } else if (const char* unused = std::getenv("LIBKD_BOX_UNUSED"); unused != nullptr) {
    // The TorchScript student with an unused parameter, find_unused_parameters as given.
    const bool find = std::string(unused) == "find";
    done = RunBox(
        WithUnusedParameter(Config(16, absl::StrCat(dir, "/unused_", unused, rank, ".pt")),
                            dir + "/unused_student.pt", find),
        absl::StrCat(dir, "/unused_", unused, rank));
    std::ofstream(absl::StrCat(dir, "/unused_", unused, "_rank", rank, ".err")) << done.message();
  } else if (const char* variant = std::getenv("LIBKD_BOX_VARIANT"); variant != nullptr) {
    const std::string config = std::string(variant) == "evaluation"
                                   ? WithEvaluation(Config(16, dir + "/eval_rank" + rank + ".pt"))
                                   : WithRankOneDying(Config(16, dir + "/die_rank" + rank + ".pt"));
    absl::StatusOr<RunResult> result =
        RunBoxForResult(config, absl::StrCat(dir, "/", variant, rank));
    std::ofstream(absl::StrCat(dir, "/", variant, "_rank", rank, ".txt"))
        << (result.ok() ? MetricsText(*result) : std::string(result.status().message()));
    done = result.status();
  } else if (const char* shared = std::getenv("LIBKD_BOX_SHARED_RUN"); shared != nullptr) {
    // One run folder for both ranks, as the tool has it: rank 0's checkpoints, read by both
    // on --resume. LIBKD_BOX_EPOCHS epochs.
    const int epochs = std::atoi(std::getenv("LIBKD_BOX_EPOCHS"));
    done = RunBox(Config(16, dir + "/shared_rank" + rank + ".pt", epochs), shared,
                  std::getenv("LIBKD_BOX_RESUME") != nullptr);
  } else {
    done = RunBox(OnDevice(Config(16, dir + "/student_rank" + rank + ".pt")),
                  dir + "/run" + rank);
  }
  if (!done.ok()) std::cerr << "rank " << rank << ": " << done.message() << "\n";
  return done.ok() ? 0 : 1;
}

c10::impl::GenericDict State(const std::string& path) {
  absl::StatusOr<c10::IValue> state = ReadTorchFile(path);
  EXPECT_THAT(state, IsOk()) << path;
  return state->toGenericDict();
}

// The same on CUDA, where the group reduces through NCCL: each rank on the GPU of its
// LOCAL_RANK. NCCL gives each rank a GPU of its own, so this needs two; without them it skips
// (tools/gpu_checks.sh runs it on a GPU machine).
TEST(BoxDdpTest, TwoRanksOnCudaTrainLikeOneProcess) {
  if (torch::cuda::device_count() < 2) {
    GTEST_SKIP() << "needs 2 CUDA devices (NCCL puts each rank on its own); found "
                 << static_cast<int>(torch::cuda::device_count());
  }
  const std::string dir = ::testing::TempDir() + "/box_ddp_cuda";
  fs::remove_all(dir);
  fs::create_directories(dir);
  char self[] = "/proc/self/exe";
  char* const argv[] = {self, nullptr};
  absl::StatusOr<std::vector<int>> ranks = StartLocalRanks(
      2, FreeLoopbackPort(), argv,
      {"LIBKD_BOX_WORKER=1", "LIBKD_BOX_DIR=" + dir, "LIBKD_BOX_DEVICE=cuda"});
  ASSERT_THAT(ranks, IsOk());
  ASSERT_THAT(WaitForRanks(*ranks), IsOk());
  ASSERT_THAT(RunBox(Config(32, dir + "/student_single.pt"), dir + "/single"), IsOk());
  const c10::impl::GenericDict rank0 = State(dir + "/student_rank0.pt");
  const c10::impl::GenericDict rank1 = State(dir + "/student_rank1.pt");
  for (const auto& entry : State(dir + "/student_single.pt")) {
    const at::Tensor mine = rank0.at(entry.key()).toTensor();
    EXPECT_TRUE(mine.equal(rank1.at(entry.key()).toTensor())) << entry.key().toStringRef();
    // CUDA's kernels against the CPU's: float32 rounding apart.
    EXPECT_TRUE(mine.allclose(entry.value().toTensor(), 1e-4, 1e-4)) << entry.key().toStringRef();
  }
}

TEST(BoxDdpTest, TwoRanksTrainLikeOneProcessOnTheGlobalBatches) {
  const std::string dir = ::testing::TempDir() + "/box_ddp";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const int port = FreeLoopbackPort();
  char self[] = "/proc/self/exe";
  char* const argv[] = {self, nullptr};
  absl::StatusOr<std::vector<int>> ranks =
      StartLocalRanks(2, port, argv, {"LIBKD_BOX_WORKER=1", "LIBKD_BOX_DIR=" + dir});
  ASSERT_THAT(ranks, IsOk());
  ASSERT_THAT(WaitForRanks(*ranks), IsOk());
  // One process on the global batches of 32: batch i of the epoch's order is the union of the
  // ranks' batches i (DistributedSampler's shards interleave the order), and CrossEntropyLoss's
  // mean over 32 is the mean of the ranks' means over 16.
  ASSERT_THAT(RunBox(Config(32, dir + "/student_single.pt"), dir + "/single"), IsOk());
  const c10::impl::GenericDict rank0 = State(dir + "/student_rank0.pt");
  const c10::impl::GenericDict rank1 = State(dir + "/student_rank1.pt");
  const c10::impl::GenericDict single = State(dir + "/student_single.pt");
  ASSERT_EQ(rank0.size(), single.size());
  for (const auto& entry : single) {
    const std::string name = entry.key().toStringRef();
    const at::Tensor expected = entry.value().toTensor();
    EXPECT_TRUE(rank0.at(name).toTensor().equal(rank1.at(name).toTensor())) << name;
    EXPECT_TRUE(rank0.at(name).toTensor().allclose(expected, /*rtol=*/0, /*atol=*/1e-5)) << name;
  }
  EXPECT_TRUE(fs::exists(dir + "/run0/ckpt/last.pt"));
  EXPECT_FALSE(fs::exists(dir + "/run1/ckpt/last.pt"));  // rank 0 writes the checkpoints
}

// A 2-rank run stopped after epoch 1 and resumed (both ranks reading rank 0's last.pt) ends
// where the uninterrupted 2-rank run ends.
TEST(BoxDdpTest, AResumedRunEqualsAnUninterruptedOne) {
  const std::string dir = ::testing::TempDir() + "/box_ddp_resume";
  fs::remove_all(dir);
  fs::create_directories(dir);
  char self[] = "/proc/self/exe";
  char* const argv[] = {self, nullptr};
  auto run = [&](const std::string& run_dir, int epochs, bool resume) {
    std::vector<std::string> env = {"LIBKD_BOX_WORKER=1", "LIBKD_BOX_DIR=" + dir,
                                    "LIBKD_BOX_SHARED_RUN=" + run_dir,
                                    absl::StrCat("LIBKD_BOX_EPOCHS=", epochs)};
    if (resume) env.push_back("LIBKD_BOX_RESUME=1");
    absl::StatusOr<std::vector<int>> ranks = StartLocalRanks(2, FreeLoopbackPort(), argv, env);
    ASSERT_THAT(ranks, IsOk());
    ASSERT_THAT(WaitForRanks(*ranks), IsOk());
  };
  run(dir + "/whole", 2, false);
  const c10::impl::GenericDict whole = State(dir + "/shared_rank1.pt");
  run(dir + "/parts", 1, false);
  run(dir + "/parts", 2, true);
  const c10::impl::GenericDict resumed = State(dir + "/shared_rank1.pt");
  for (const auto& entry : whole) {
    EXPECT_TRUE(resumed.at(entry.key()).toTensor().equal(entry.value().toTensor()))
        << entry.key().toStringRef();
  }
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Validation and test run on each rank's exact shard (51 + 50 of 101 samples) and are added
// across the ranks: both ranks report the metrics that one process, evaluating all 101 samples
// with the same model, reports.
TEST(BoxDdpTest, ShardedEvaluationGivesTheWholeSetsMetrics) {
  const std::string dir = ::testing::TempDir() + "/box_ddp_eval";
  fs::remove_all(dir);
  fs::create_directories(dir);
  char self[] = "/proc/self/exe";
  char* const argv[] = {self, nullptr};
  absl::StatusOr<std::vector<int>> ranks = StartLocalRanks(
      2, FreeLoopbackPort(), argv,
      {"LIBKD_BOX_WORKER=1", "LIBKD_BOX_DIR=" + dir, "LIBKD_BOX_VARIANT=evaluation"});
  ASSERT_THAT(ranks, IsOk());
  ASSERT_THAT(WaitForRanks(*ranks), IsOk());
  absl::StatusOr<RunResult> single =
      RunBoxForResult(WithEvaluation(Config(32, dir + "/eval_single.pt")), dir + "/single");
  ASSERT_THAT(single, IsOk());
  for (const char* rank : {"0", "1"}) {
    std::istringstream words(ReadText(absl::StrCat(dir, "/evaluation_rank", rank, ".txt")));
    for (const auto* metrics : {&single->final_metrics, &single->test_metrics}) {
      double loss = -1, accuracy = -1;
      words >> loss >> accuracy;
      EXPECT_NEAR(loss, metrics->at("loss"), 1e-5) << "rank " << rank;
      EXPECT_DOUBLE_EQ(accuracy, metrics->at("accuracy")) << "rank " << rank;
      // A whole number of hits out of 101 (not of 51 or 50).
      EXPECT_NEAR(accuracy * 101, std::round(accuracy * 101), 1e-9) << "rank " << rank;
    }
    // The epoch's training loss is the mean over both ranks' steps: one process's on the
    // global batches (each the union of the ranks' batches of 16).
    double train_loss = -1;
    words >> train_loss;
    EXPECT_NEAR(train_loss, single->epochs.back().train_loss, 1e-5) << "rank " << rank;
  }
}

// What trains beside the student is kept in sync too: a teacher that trains (wrapped as the
// student is) and the student's auxiliary module, as Python's DDP keeps them inside the
// models it wraps. Both ranks end with one teacher, and rank 0's teacher, student and auxiliary
// module equal those of one process training on the global batches.
TEST(BoxDdpTest, ATrainingTeacherAndAuxiliaryModulesStayInSync) {
  const std::string dir = ::testing::TempDir() + "/box_ddp_aux";
  fs::remove_all(dir);
  fs::create_directories(dir);
  char self[] = "/proc/self/exe";
  char* const argv[] = {self, nullptr};
  absl::StatusOr<std::vector<int>> ranks = StartLocalRanks(
      2, FreeLoopbackPort(), argv,
      {"LIBKD_BOX_WORKER=1", "LIBKD_BOX_DIR=" + dir, "LIBKD_BOX_AUX=1"});
  ASSERT_THAT(ranks, IsOk());
  ASSERT_THAT(WaitForRanks(*ranks), IsOk());
  ASSERT_THAT(RunBox(AuxConfig(32, dir, "single"), dir + "/aux_single"), IsOk());
  const auto close = [](const c10::impl::GenericDict& a, const c10::impl::GenericDict& b,
                        const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (const auto& entry : b) {
      EXPECT_TRUE(a.at(entry.key()).toTensor().allclose(entry.value().toTensor(), 0, 1e-5))
          << what << " " << entry.key().toStringRef();
    }
  };
  const c10::impl::GenericDict teacher0 = State(dir + "/aux_teacher_rank0.pt");
  const c10::impl::GenericDict teacher1 = State(dir + "/aux_teacher_rank1.pt");
  for (const auto& entry : teacher0) {
    EXPECT_TRUE(entry.value().toTensor().equal(teacher1.at(entry.key()).toTensor()))
        << "teacher " << entry.key().toStringRef();
  }
  close(teacher0, State(dir + "/aux_teacher_single.pt"), "teacher");
  close(State(dir + "/aux_student_rank0.pt"), State(dir + "/aux_student_single.pt"), "student");
  close(State(dir + "/aux_rank0/ckpt/last.pt").at("auxiliary_modules").toGenericDict(),
        State(dir + "/aux_single/ckpt/last.pt").at("auxiliary_modules").toGenericDict(),
        "auxiliary module");
}

// find_unused_parameters reaches DDP's Reducer, as in PyTorch's own DDP test of the kwarg: a
// student with a parameter no step uses trains with it (that parameter untouched, the others
// equal on both ranks), and without it the Reducer stops the run at the second step, saying
// that a parameter was not used in producing the loss.
TEST(BoxDdpTest, FindUnusedParametersReachesTheReducer) {
  const std::string dir = ::testing::TempDir() + "/box_ddp_unused";
  fs::remove_all(dir);
  fs::create_directories(dir);
  at::manual_seed(5);
  const at::Tensor w = at::randn({4, 36}), unused = at::randn({3});
  torch::jit::Module student("Student");
  student.register_parameter("w", w.clone(), /*is_buffer=*/false);
  student.register_parameter("b", at::zeros({4}), /*is_buffer=*/false);
  student.register_parameter("unused", unused.clone(), /*is_buffer=*/false);
  student.define("def forward(self, x):\n  return torch.flatten(x, 1) @ self.w.t() + self.b\n");
  student.save(dir + "/unused_student.pt");
  char self[] = "/proc/self/exe";
  char* const argv[] = {self, nullptr};
  for (const std::string find : {"find", "nofind"}) {
    absl::StatusOr<std::vector<int>> ranks =
        StartLocalRanks(2, FreeLoopbackPort(), argv,
                        {"LIBKD_BOX_WORKER=1", "LIBKD_BOX_DIR=" + dir, "LIBKD_BOX_UNUSED=" + find});
    ASSERT_THAT(ranks, IsOk());
    absl::Status waited = WaitForRanks(*ranks);
    if (find == "find") {
      ASSERT_THAT(waited, IsOk());
      const c10::impl::GenericDict rank0 = State(dir + "/unused_find0.pt");
      const c10::impl::GenericDict rank1 = State(dir + "/unused_find1.pt");
      EXPECT_TRUE(rank0.at("unused").toTensor().equal(unused));
      EXPECT_FALSE(rank0.at("w").toTensor().equal(w));  // it trained
      EXPECT_TRUE(rank0.at("w").toTensor().equal(rank1.at("w").toTensor()));
    } else {
      EXPECT_FALSE(waited.ok());
      EXPECT_FALSE(fs::exists(dir + "/unused_nofind0.pt"));
    }
  }
  EXPECT_THAT(ReadText(dir + "/unused_nofind_rank0.err"), HasSubstr("find_unused_parameters"));
}

// A rank that dies inside the box's training loop: the other's run fails, within the
// monitor's second of the connection closing, with an error that names rank 1.
TEST(BoxDdpTest, ALostRankIsNamedByTheOther) {
  const std::string dir = ::testing::TempDir() + "/box_ddp_die";
  fs::remove_all(dir);
  fs::create_directories(dir);
  char self[] = "/proc/self/exe";
  char* const argv[] = {self, nullptr};
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<int>> ranks =
      StartLocalRanks(2, FreeLoopbackPort(), argv,
                      {"LIBKD_BOX_WORKER=1", "LIBKD_BOX_DIR=" + dir, "LIBKD_BOX_VARIANT=die"});
  ASSERT_THAT(ranks, IsOk());
  int status = 0;
  ASSERT_EQ(waitpid((*ranks)[1], &status, 0), (*ranks)[1]);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3);
  ASSERT_EQ(waitpid((*ranks)[0], &status, 0), (*ranks)[0]);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  EXPECT_THAT(ReadText(dir + "/die_rank0.txt"),
              StartsWith("rank 1 of 2 was lost: its heartbeat stopped (the process died or "
                         "hangs); rank 0 stopped on: "));
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) {
  if (std::getenv("LIBKD_BOX_WORKER") != nullptr) return kd::Worker();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
