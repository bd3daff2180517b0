// What a config's datasets and loaders do to a run, seen from inside the datasets: a subset
// reads only its samples, a sampler decides which samples an epoch visits and in what order,
// and worker threads change nothing in the result.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "base/registry.h"
#include "base/status_macros.h"
#include "distill/boxes/box.h"
#include "distill/boxes/testing/box_test_fixture.h"
#include "distill/data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using test::BoxTest;
using test::ExpectSameStudent;
using test::kCe;
using test::kStudent;
using test::Parse;
using test::RunDir;
using ::testing::Each;
using ::testing::Ge;
using ::testing::HasSubstr;
using ::testing::Lt;

// The indices each "recorded" dataset was asked for, by its "tag" kwarg.
std::mutex recorded_mu;
std::map<std::string, std::multiset<int64_t>>& Recorded() {
  static auto* const recorded = new std::map<std::string, std::multiset<int64_t>>;
  return *recorded;
}

// The synthetic task of box_test_fixture (4 classes of 6x6 prototypes plus noise) that records
// the indices it serves, plus uniform noise from the batch's generator standing in for random
// augmentation.
class RecordedDataset final : public Dataset {
 public:
  RecordedDataset(std::shared_ptr<Dataset> data, std::string tag)
      : data_(std::move(data)), tag_(std::move(tag)) {}
  int64_t size() const override { return data_->size(); }
  int64_t num_classes() const override { return data_->num_classes(); }

 protected:
  Samples GetSamples(const at::Tensor& indices, at::Generator& generator) const override {
    {
      std::lock_guard<std::mutex> lock(recorded_mu);
      std::multiset<int64_t>& seen = Recorded()[tag_];
      for (int64_t i = 0; i < indices.size(0); ++i) seen.insert(indices[i].item<int64_t>());
    }
    Batch batch = data_->Get(indices, generator);
    at::Tensor x = batch.samples.toTensor();
    return {x + 0.1 * at::rand(x.sizes(), generator), batch.targets.toTensor()};
  }

 private:
  std::shared_ptr<Dataset> data_;
  std::string tag_;
};

KD_REGISTER(DatasetRegistry(), "recorded",
            [](const Kwargs& kwargs) -> absl::StatusOr<std::shared_ptr<Dataset>> {
              KD_ASSIGN_OR_RETURN(
                  std::shared_ptr<Dataset> data,
                  MakeDataset("synthetic", {{"num_samples", kwargs.at("num_samples")},
                                            {"num_classes", int64_t{4}},
                                            {"height", int64_t{6}},
                                            {"width", int64_t{6}},
                                            {"seed", int64_t{1}}}));
              return std::make_shared<RecordedDataset>(std::move(data),
                                                       kwargs.at("tag").toStringRef());
            },
            {{.name = "num_samples", .type = KwargType::kInteger, .doc = "samples"},
             {.name = "tag", .type = KwargType::kString, .doc = "where it records"}});

// A run on "recorded" datasets: training over `train_loader` (its text inside the braces),
// validation on 64 samples of its own.
DistillConfig Config(const std::string& train_dataset, const std::string& train_loader) {
  return Parse(absl::StrCat(
      R"pb(run { name: "t" seed: 3 })pb", train_dataset,
      R"pb(datasets {
             id: "val"
             key: "recorded"
             kwargs { name: "num_samples" integer: 64 }
             kwargs { name: "tag" str: "val" }
           }
           evaluation { metrics { key: "accuracy" } })pb",
      kStudent, "train { name: \"s\" num_epochs: 2 train_data_loader { dataset_id: \"train\" ",
      train_loader,
      R"pb(}
           val_data_loader { dataset_id: "val" batch_size: 16 }
           optimizer {
             key: "SGD"
             kwargs { name: "lr" number: 0.1 }
           })pb",
      kCe, "}"));
}

std::string TrainDataset(const std::string& tag, const std::string& subset = "") {
  return absl::StrCat(R"pb(datasets { id: "train" key: "recorded"
                                      kwargs { name: "num_samples" integer: 256 }
                                      kwargs { name: "tag" str: ")pb",
                      tag, "\" } ", subset, " }");
}

absl::StatusOr<RunResult> RunConfig(const DistillConfig& config, const std::string& dir) {
  KD_ASSIGN_OR_RETURN(std::unique_ptr<Box> box, MakeBox(config, {.run_dir = dir}));
  return box->Run();
}

std::multiset<int64_t> Seen(const std::string& tag) {
  std::lock_guard<std::mutex> lock(recorded_mu);
  return Recorded()[tag];
}

// Workers assemble the same batches in the same order: the run is bit-identical to one
// without, in training and evaluation alike.
TEST_F(BoxTest, WorkerThreadsChangeNothing) {
  const std::string loader = "batch_size: 32 shuffle: true";
  const std::string without = RunDir("workers0"), with = RunDir("workers2");
  absl::StatusOr<RunResult> a = RunConfig(Config(TrainDataset("w0"), loader), without);
  ASSERT_THAT(a, IsOk());
  DistillConfig with_workers = Config(TrainDataset("w2"), absl::StrCat(loader, " num_workers: 2"));
  with_workers.mutable_train()->mutable_val_data_loader()->set_num_workers(3);
  absl::StatusOr<RunResult> b = RunConfig(with_workers, with);
  ASSERT_THAT(b, IsOk());
  ExpectSameStudent(without, with);
  EXPECT_EQ(a->final_metrics, b->final_metrics);
  EXPECT_EQ(Seen("w0"), Seen("w2"));
}

// RandomSampler is shuffle's order; SequentialSampler visits every sample once an epoch in
// index order, which trains another student; SubsetRandomSampler visits only its indices.
TEST_F(BoxTest, TheSamplerDecidesWhatAnEpochVisits) {
  const std::string shuffled = RunDir("shuffled"), random = RunDir("random");
  ASSERT_THAT(RunConfig(Config(TrainDataset("shuffled"), "batch_size: 32 shuffle: true"), shuffled),
              IsOk());
  ASSERT_THAT(
      RunConfig(Config(TrainDataset("random"), "batch_size: 32 sampler { key: \"RandomSampler\" }"),
                random),
      IsOk());
  ExpectSameStudent(shuffled, random);

  const std::string sequential = RunDir("sequential");
  ASSERT_THAT(RunConfig(Config(TrainDataset("sequential"),
                               "batch_size: 32 sampler { key: \"SequentialSampler\" }"),
                        sequential),
              IsOk());
  EXPECT_EQ(Seen("sequential"), Seen("shuffled"));  // each sample twice, in another order
  EXPECT_FALSE(at::equal(test::LastStudentTensor(sequential, "fc.weight"),
                         test::LastStudentTensor(shuffled, "fc.weight")));

  ASSERT_THAT(RunConfig(Config(TrainDataset("subset_sampler"),
                               "batch_size: 8 sampler { key: \"SubsetRandomSampler\" kwargs { "
                               "name: \"indices\" integers { values: [3, 5, 250] } } }"),
                        RunDir("subset_sampler")),
              IsOk());
  EXPECT_EQ(Seen("subset_sampler"), (std::multiset<int64_t>{3, 3, 5, 5, 250, 250}));
}

// A dataset's subset serves only its samples; a subset that does not fit is named.
TEST_F(BoxTest, ASubsetReadsOnlyItsSamples) {
  ASSERT_THAT(RunConfig(Config(TrainDataset("part", "subset { start: 200 stop: 240 }"),
                               "batch_size: 8 shuffle: true"),
                        RunDir("subset")),
              IsOk());
  const std::multiset<int64_t> seen = Seen("part");
  EXPECT_EQ(seen.size(), 80u);  // 40 samples, 2 epochs
  EXPECT_THAT(seen, Each(Ge(200)));
  EXPECT_THAT(seen, Each(Lt(240)));
  EXPECT_THAT(
      MakeBox(Config(TrainDataset("big", "subset { start: 200 stop: 300 }"), "batch_size: 8"),
              {.run_dir = RunDir("big")}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("dataset \"train\": subset [200, 300) does not fit a dataset of "
                         "256 samples")));
}

}  // namespace
}  // namespace kd
