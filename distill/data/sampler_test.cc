#include "distill/data/sampler.h"

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "base/registry.h"
#include "distill/config/plugin_kinds.h"
#include "distill/data/data_loader.h"
#include "distill/data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

// The orders Python's samplers gave (testdata/make_sampler_orders.py), by case name.
std::map<std::string, std::vector<int64_t>> PythonOrders() {
  std::ifstream in(test::RunfilePath("distill/data/testdata/sampler_orders.txt"));
  EXPECT_TRUE(in.good());
  std::map<std::string, std::vector<int64_t>> orders;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t colon = line.find(':');
    std::istringstream values(line.substr(colon + 1));
    std::vector<int64_t>& order = orders[line.substr(0, colon)];
    for (int64_t v; values >> v;) order.push_back(v);
  }
  return orders;
}

std::vector<int64_t> Values(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

std::vector<int64_t> Order(const std::string& key, const Kwargs& kwargs, uint64_t seed,
                           int64_t epoch) {
  absl::StatusOr<std::shared_ptr<const Sampler>> sampler = MakeSampler(key, kwargs);
  EXPECT_THAT(sampler, IsOk());
  if (!sampler.ok()) return {};
  return Values((*sampler)->Order(/*dataset_size=*/10, seed, epoch));
}

TEST(SamplerRegistryTest, RegistersTorchsSamplers) {
  const RegistryBase* registry = FindRegistry(kSamplerKind);
  ASSERT_NE(registry, nullptr);
  EXPECT_EQ(registry, &SamplerRegistry());
  EXPECT_THAT(registry->Keys(),
              UnorderedElementsAre("SequentialSampler", "RandomSampler", "SubsetRandomSampler",
                                   "WeightedRandomSampler", "DistributedSampler"));
}

// Each sampler draws what Python's draws with generator=torch.Generator().manual_seed(seed +
// epoch).
TEST(SamplerTest, OrdersEqualPythons) {
  const std::map<std::string, std::vector<int64_t>> python = PythonOrders();
  ASSERT_EQ(python.size(), 12u);
  EXPECT_THAT(Order("RandomSampler", {}, 3, 0), ElementsAreArray(python.at("random_s3_e0")));
  EXPECT_THAT(Order("RandomSampler", {}, 3, 1), ElementsAreArray(python.at("random_s3_e1")));
  EXPECT_THAT(Order("RandomSampler", {{"replacement", true}, {"num_samples", int64_t{70}}}, 3, 2),
              ElementsAreArray(python.at("random_replacement70_s3_e2")));
  EXPECT_THAT(Order("RandomSampler", {{"num_samples", int64_t{25}}}, 7, 0),
              ElementsAreArray(python.at("random_num25_s7_e0")));
  EXPECT_THAT(Order("SequentialSampler", {}, 5, 5), ElementsAreArray(python.at("sequential")));
  EXPECT_THAT(Order("SubsetRandomSampler", {{"indices", c10::List<int64_t>({9, 2, 5, 7})}}, 1, 1),
              ElementsAreArray(python.at("subset_9_2_5_7_s1_e1")));
  EXPECT_THAT(Order("WeightedRandomSampler",
                    {{"weights", c10::List<double>({0.1, 0.9, 0.4, 0.7, 3.0, 0.6})},
                     {"num_samples", int64_t{12}}},
                    0, 0),
              ElementsAreArray(python.at("weighted_replacement12_s0_e0")));
  EXPECT_THAT(Order("WeightedRandomSampler",
                    {{"weights", c10::List<double>({0.9, 0.4, 0.05, 0.2, 0.3, 0.1})},
                     {"num_samples", int64_t{5}},
                     {"replacement", false}},
                    2, 3),
              ElementsAreArray(python.at("weighted_noreplacement5_s2_e3")));
  // DistributedSampler's own seed kwarg wins over the run's.
  EXPECT_THAT(Order("DistributedSampler", {{"seed", int64_t{11}}}, 99, 2),
              ElementsAreArray(python.at("distributed_1of1_s11_e2")));
  EXPECT_THAT(Order("DistributedSampler", {}, 11, 2),
              ElementsAreArray(python.at("distributed_1of1_s11_e2")));
}

// A loader of rank 1 of 3 gives DistributedSampler(num_replicas=3, rank=1)'s shard: padded, or
// cut with drop_last.
TEST(SamplerTest, ALoaderShardsAsDistributedSamplerDoes) {
  const std::map<std::string, std::vector<int64_t>> python = PythonOrders();
  absl::StatusOr<std::shared_ptr<Dataset>> data = MakeDataset(
      "synthetic", {{"num_samples", int64_t{10}}, {"height", int64_t{2}}, {"width", int64_t{2}}});
  ASSERT_THAT(data, IsOk());
  auto shard = [&](const Kwargs& kwargs, uint64_t seed, int64_t rank, int64_t epoch) {
    DataLoaderOptions options{.batch_size = 10, .seed = seed, .num_replicas = 3, .rank = rank};
    options.sampler = *MakeSampler("DistributedSampler", kwargs);
    absl::StatusOr<DataLoader> loader = DataLoader::Create(*data, options);
    EXPECT_THAT(loader, IsOk());
    loader->SetEpoch(epoch);
    return Values(loader->BatchIndices(0));
  };
  EXPECT_THAT(shard({}, 11, 1, 2), ElementsAreArray(python.at("distributed_rank1of3_s11_e2")));
  EXPECT_THAT(shard({{"drop_last", true}}, 11, 1, 2),
              ElementsAreArray(python.at("distributed_rank1of3_s11_e2_drop_last")));
  EXPECT_THAT(shard({{"shuffle", false}}, 0, 2, 0),
              ElementsAreArray(python.at("distributed_rank2of3_noshuffle")));
}

// `shuffle: true` and RandomSampler give one order: both are randperm(n) seeded with seed +
// epoch.
TEST(SamplerTest, ShuffleIsRandomSampler) {
  absl::StatusOr<std::shared_ptr<Dataset>> data = MakeDataset(
      "synthetic", {{"num_samples", int64_t{10}}, {"height", int64_t{2}}, {"width", int64_t{2}}});
  ASSERT_THAT(data, IsOk());
  absl::StatusOr<DataLoader> shuffled =
      DataLoader::Create(*data, {.batch_size = 10, .shuffle = true, .seed = 3});
  ASSERT_THAT(shuffled, IsOk());
  shuffled->SetEpoch(1);
  EXPECT_THAT(Values(shuffled->BatchIndices(0)),
              ElementsAreArray(Order("RandomSampler", {}, 3, 1)));
}

TEST(SamplerTest, BadKwargsAndSizesAreNamed) {
  EXPECT_THAT(
      MakeSampler("RandomSampeler", {}),
      StatusIs(absl::StatusCode::kNotFound, AllOf(HasSubstr("did you mean \"RandomSampler\"?"),
                                                  HasSubstr("WeightedRandomSampler"))));
  EXPECT_THAT(MakeSampler("DistributedSampler", {{"num_replicas", int64_t{2}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_replicas")));
  EXPECT_THAT(MakeSampler("WeightedRandomSampler", {{"weights", c10::List<double>({1.0, 0.0})},
                                                    {"num_samples", int64_t{2}},
                                                    {"replacement", false}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cannot exceed the number of positive weights (1)")));
  EXPECT_THAT(MakeSampler("SubsetRandomSampler", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("indices")));
  absl::StatusOr<std::shared_ptr<const Sampler>> subset =
      MakeSampler("SubsetRandomSampler", {{"indices", c10::List<int64_t>({1, 12})}});
  ASSERT_THAT(subset, IsOk());
  EXPECT_THAT((*subset)->CheckDatasetSize(10),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "sampler \"SubsetRandomSampler\": indices must be in [0, 10) for this "
                       "dataset of 10 samples; got 12"));
}

}  // namespace
}  // namespace kd
