#include "distill/data/dataset.h"

#include <set>
#include <string>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "base/registry.h"
#include "distill/config/plugin_kinds.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;

TEST(DatasetRegistryTest, RegistersEveryDataset) {
  const RegistryBase* registry = FindRegistry(kDatasetKind);
  ASSERT_NE(registry, nullptr);
  EXPECT_EQ(registry, &DatasetRegistry());
  EXPECT_THAT(registry->Keys(), Contains("fashion_mnist"));
  EXPECT_THAT(registry->Keys(), Contains("synthetic"));
  EXPECT_THAT(registry->Keys(), Contains("token_file"));
  EXPECT_THAT(registry->Keys(), Contains("text_file"));
}

TEST(DatasetRegistryTest, EveryKwargIsTypedAndDocumented) {
  for (const std::string& key : DatasetRegistry().Keys()) {
    const auto specs = DatasetRegistry().KwargSpecs(key);
    ASSERT_TRUE(specs.has_value()) << key << " accepts any kwargs";
    for (const KwargSpec& spec : *specs) {
      EXPECT_NE(spec.type, KwargType::kAny) << key << "." << spec.name;
      EXPECT_FALSE(spec.doc.empty()) << key << "." << spec.name;
    }
  }
}

TEST(MakeDatasetTest, UnknownKeyNamesTheNearest) {
  EXPECT_THAT(
      MakeDataset("fashion_mnst", {}),
      StatusIs(absl::StatusCode::kNotFound,
               AllOf(HasSubstr("no dataset \"fashion_mnst\""),
                     HasSubstr("did you mean \"fashion_mnist\"?"), HasSubstr("synthetic"))));
}

TEST(MakeDatasetTest, ChecksKwargsAgainstTheContract) {
  EXPECT_THAT(MakeDataset("fashion_mnist", {{"split", "validation"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("dataset \"fashion_mnist\""), HasSubstr("split"),
                             HasSubstr("validation"))));
  EXPECT_THAT(MakeDataset("fashion_mnist", {{"std", 0.0}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("std")));
  EXPECT_THAT(MakeDataset("fashion_mnist", {{"random_crop_padding", int64_t{-1}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("random_crop_padding")));
  EXPECT_THAT(MakeDataset("fashion_mnist", {{"random_crop_padding", 4.5}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("random_crop_padding")));
  EXPECT_THAT(MakeDataset("fashion_mnist", {{"horizontal_flp", true}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("horizontal_flip")));
  EXPECT_THAT(MakeDataset("synthetic", {{"num_samples", int64_t{0}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_samples")));
  // The synthetic dataset's own check: its size as a whole.
  EXPECT_THAT(MakeDataset("synthetic", {{"num_samples", int64_t{1} << 20},
                                        {"height", int64_t{1024}},
                                        {"width", int64_t{1024}}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("dataset \"synthetic\""), HasSubstr("2^28"))));
}

TEST(DatasetGetTest, PutsTheIndicesInSupp) {
  absl::StatusOr<std::shared_ptr<Dataset>> dataset =
      MakeDataset("synthetic", {{"num_samples", int64_t{20}},
                                {"height", int64_t{4}},
                                {"width", int64_t{5}},
                                {"channels", int64_t{3}},
                                {"num_classes", int64_t{4}}});
  ASSERT_THAT(dataset, IsOk());
  const at::Tensor indices = at::tensor({7, 0, 7, 19}, at::kLong);
  const Batch batch = (*dataset)->Get(indices, uint64_t{1});
  ASSERT_TRUE(batch.samples.isTensor());
  EXPECT_EQ(batch.samples.toTensor().sizes(), at::IntArrayRef({4, 3, 4, 5}));
  EXPECT_EQ(batch.samples.toTensor().scalar_type(), at::kFloat);
  ASSERT_TRUE(batch.targets.isTensor());
  EXPECT_EQ(batch.targets.toTensor().scalar_type(), at::kLong);
  // Sample i is of class i % num_classes.
  EXPECT_TRUE(batch.targets.toTensor().equal(at::tensor({3, 0, 3, 3}, at::kLong)));
  ASSERT_TRUE(batch.supp.isGenericDict());
  const c10::Dict<std::string, at::Tensor> supp =
      c10::impl::toTypedDict<std::string, at::Tensor>(batch.supp.toGenericDict());
  ASSERT_TRUE(supp.contains("indices"));
  EXPECT_TRUE(supp.at("indices").equal(indices));
}

// torch.utils.data.random_split's parts, the indices Python's gives for the same seed
// (random_split(range(n), lengths, torch.Generator().manual_seed(42)), recorded from torch
// 2.14.1): fractions rounded as torch rounds them, or counts. Synthetic sample i is of class i
// (num_classes > n), so the targets are the indices.
TEST(RandomSplitTest, PartsAreTorchsForTheSameSeed) {
  struct Case {
    int64_t n;
    std::vector<double> lengths;
    std::vector<std::vector<int64_t>> parts;
  };
  for (const Case& c : std::vector<Case>{
           {10, {0.7, 0.3}, {{2, 6, 1, 8, 4, 5, 0}, {9, 3, 7}}},
           {11, {0.9, 0.1}, {{6, 8, 9, 2, 1, 10, 0, 7, 3, 5}, {4}}},
           {7, {4, 3}, {{1, 6, 3, 5}, {4, 0, 2}}}}) {
    absl::StatusOr<std::shared_ptr<Dataset>> all = MakeDataset(
        "synthetic", {{"num_samples", c.n}, {"num_classes", int64_t{100}}, {"height", int64_t{2}},
                      {"width", int64_t{2}}});
    ASSERT_THAT(all, IsOk());
    for (int part = 0; part < 2; ++part) {
      SCOPED_TRACE(absl::StrCat(c.n, " samples, part ", part));
      absl::StatusOr<std::shared_ptr<Dataset>> split = RandomSplitOf(*all, c.lengths, 42, part);
      ASSERT_THAT(split, IsOk());
      EXPECT_TRUE((*split)->ListTargets()->equal(at::tensor(c.parts[part], at::kLong)));
      const Batch batch = (*split)->Get(at::tensor({0}, at::kLong), uint64_t{0});
      EXPECT_EQ(batch.targets.toTensor().item<int64_t>(), c.parts[part][0]);
    }
  }
  absl::StatusOr<std::shared_ptr<Dataset>> all =
      MakeDataset("synthetic", {{"num_samples", int64_t{7}}});
  ASSERT_THAT(all, IsOk());
  EXPECT_THAT(RandomSplitOf(*all, {4, 4}, 42, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the lengths sum to 8, not the dataset's 7 samples")));
  EXPECT_THAT(RandomSplitOf(*all, {0.5, 0.5}, 42, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("part 2 of 2 lengths")));
}

// torchdistill's split_dataset (torchdistill.datasets.util, recorded from torchdistill 1.1.5 on
// range(n) with generator_seed 42): lengths that do not sum to the size are ratios of it, each
// part truncated and the last one the rest; 11 samples at [0.9, 0.1] split 9 + 2 there, where
// torch's own fractions give 10 + 1.
TEST(RandomSplitTest, SplitDatasetsRuleIsTorchdistills) {
  struct Case {
    int64_t n;
    std::vector<double> lengths;
    std::vector<std::vector<int64_t>> parts;
  };
  for (const Case& c : std::vector<Case>{
           {11, {0.9, 0.1}, {{6, 8, 9, 2, 1, 10, 0, 7, 3}, {5, 4}}},
           {11, {9, 1}, {{6, 8, 9, 2, 1, 10, 0, 7, 3}, {5, 4}}},
           {7, {4, 3}, {{1, 6, 3, 5}, {4, 0, 2}}},
           {10, {2, 1, 1}, {{2, 6, 1, 8, 4}, {5, 0}, {9, 3, 7}}}}) {
    absl::StatusOr<std::shared_ptr<Dataset>> all = MakeDataset(
        "synthetic", {{"num_samples", c.n}, {"num_classes", int64_t{100}}, {"height", int64_t{2}},
                      {"width", int64_t{2}}});
    ASSERT_THAT(all, IsOk());
    for (size_t part = 0; part < c.parts.size(); ++part) {
      SCOPED_TRACE(absl::StrCat(c.n, " samples, ", c.lengths.size(), " lengths, part ", part));
      absl::StatusOr<std::shared_ptr<Dataset>> split =
          RandomSplitOf(*all, c.lengths, 42, static_cast<int>(part), LengthsRule::kSplitDataset);
      ASSERT_THAT(split, IsOk());
      EXPECT_TRUE((*split)->ListTargets()->equal(at::tensor(c.parts[part], at::kLong)));
    }
  }
}

// torchdistill's SSKDDatasetWrapper: each sample, then its rotations by 90, 180 and 270 degrees
// counter-clockwise (PIL's Image.rotate: a 3x3 image's top-right pixel goes to the top left,
// then the bottom left, then the bottom right), the targets and indices unchanged.
TEST(DatasetWrapperTest, SskdStacksFourRotations) {
  absl::StatusOr<std::shared_ptr<Dataset>> dataset =
      MakeDataset("synthetic", {{"num_samples", int64_t{6}},
                                {"height", int64_t{3}},
                                {"width", int64_t{3}},
                                {"channels", int64_t{2}},
                                {"num_classes", int64_t{3}}});
  ASSERT_THAT(dataset, IsOk());
  auto wrapped = WrapDataset("SSKDDatasetWrapper", *dataset, {});
  ASSERT_THAT(wrapped, IsOk());
  EXPECT_EQ((*wrapped)->size(), 6);
  const at::Tensor indices = at::tensor({4, 1}, at::kLong);
  const Batch plain = (*dataset)->Get(indices, uint64_t{3});
  const Batch views = (*wrapped)->Get(indices, uint64_t{3});
  const at::Tensor x = plain.samples.toTensor();
  const at::Tensor v = views.samples.toTensor();
  ASSERT_EQ(v.sizes(), at::IntArrayRef({2, 4, 2, 3, 3}));
  EXPECT_TRUE(v.select(1, 0).equal(x));
  EXPECT_TRUE(views.targets.toTensor().equal(plain.targets.toTensor()));
  // Pixel (row 0, column 2) of each sample and channel, followed through the rotations.
  const at::Tensor corner = x.index({at::indexing::Slice(), at::indexing::Slice(), 0, 2});
  EXPECT_TRUE(
      v.select(1, 1).index({at::indexing::Slice(), at::indexing::Slice(), 0, 0}).equal(corner));
  EXPECT_TRUE(
      v.select(1, 2).index({at::indexing::Slice(), at::indexing::Slice(), 2, 0}).equal(corner));
  EXPECT_TRUE(
      v.select(1, 3).index({at::indexing::Slice(), at::indexing::Slice(), 2, 2}).equal(corner));

  EXPECT_THAT(WrapDataset("SSKDDatasetWraper", *dataset, {}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("SSKDDatasetWrapper")));
  auto oblong = MakeDataset(
      "synthetic", {{"num_samples", int64_t{2}}, {"height", int64_t{3}}, {"width", int64_t{4}}});
  ASSERT_THAT(oblong, IsOk());
  auto rotated = WrapDataset("SSKDDatasetWrapper", *oblong, {});
  ASSERT_THAT(rotated, IsOk());
  EXPECT_THAT([&] { (*rotated)->Get(at::tensor({0}, at::kLong), uint64_t{1}); },
              ::testing::ThrowsMessage<c10::Error>(HasSubstr("square images")));
}

c10::Dict<std::string, at::Tensor> Supp(const Batch& batch) {
  return c10::impl::toTypedDict<std::string, at::Tensor>(batch.supp.toGenericDict());
}

// A dataset that cannot list its targets without loading its samples.
class Unlisted final : public Dataset {
 public:
  int64_t size() const override { return 4; }
  int64_t num_classes() const override { return 2; }

 protected:
  Samples GetSamples(const at::Tensor& indices, at::Generator&) const override {
    return {at::zeros({indices.size(0), 1, 2, 2}), indices % 2};
  }
};

// torchdistill's CRDDatasetWrapper: pos_idx the sample itself ("exact") or one of its class
// ("relax"), contrast_idx the positive then num_negative_samples samples of other classes,
// distinct while the class's negatives suffice; `ratio` keeps a fixed share of each class's
// negatives. Synthetic sample i is of class i % 3.
TEST(DatasetWrapperTest, CrdDrawsPositivesAndNegativesByClass) {
  auto dataset = MakeDataset("synthetic", {{"num_samples", int64_t{12}},
                                           {"height", int64_t{2}},
                                           {"width", int64_t{2}},
                                           {"num_classes", int64_t{3}}});
  ASSERT_THAT(dataset, IsOk());
  const at::Tensor indices = at::tensor({0, 4, 8, 5, 5}, at::kLong);
  auto class_of = [](int64_t i) { return i % 3; };
  for (const char* mode : {"exact", "relax"}) {
    for (int64_t k : {4, 10}) {  // 8 negatives per class: without, then with replacement
      SCOPED_TRACE(absl::StrCat(mode, " ", k));
      auto crd = WrapDataset("CRDDatasetWrapper", *dataset,
                             {{"num_negative_samples", k}, {"mode", std::string(mode)}});
      ASSERT_THAT(crd, IsOk());
      const Batch batch = (*crd)->Get(indices, uint64_t{7});
      const auto supp = Supp(batch);
      EXPECT_TRUE(supp.at("indices").equal(indices));
      const at::Tensor pos = supp.at("pos_idx"), contrast = supp.at("contrast_idx");
      ASSERT_EQ(contrast.sizes(), at::IntArrayRef({5, 1 + k}));
      EXPECT_TRUE(contrast.select(1, 0).equal(pos));
      for (int64_t i = 0; i < 5; ++i) {
        const int64_t own = class_of(indices[i].item<int64_t>());
        if (std::string(mode) == "exact") {
          EXPECT_EQ(pos[i].item<int64_t>(), indices[i].item<int64_t>());
        } else {
          EXPECT_EQ(class_of(pos[i].item<int64_t>()), own);
        }
        std::set<int64_t> negatives;
        for (int64_t j = 1; j <= k; ++j) {
          const int64_t n = contrast[i][j].item<int64_t>();
          EXPECT_NE(class_of(n), own) << n;
          negatives.insert(n);
        }
        if (k == 4) {
          EXPECT_EQ(negatives.size(), 4u);  // without replacement
        }
      }
      // The same seed draws the same batch.
      EXPECT_TRUE(Supp((*crd)->Get(indices, uint64_t{7})).at("contrast_idx").equal(contrast));
    }
  }
  // ratio 0.5 keeps 4 of each class's 8 negatives: drawing 4 gives each row of a class that set.
  auto kept = WrapDataset("CRDDatasetWrapper", *dataset,
                          {{"num_negative_samples", int64_t{4}}, {"ratio", 0.5}});
  ASSERT_THAT(kept, IsOk());
  const at::Tensor contrast =
      Supp((*kept)->Get(at::tensor({1, 4, 7}, at::kLong), uint64_t{2})).at("contrast_idx");
  auto row_set = [&](int64_t i) {
    const at::Tensor row = std::get<0>(at::sort(contrast[i].slice(0, 1)));
    return std::vector<int64_t>(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + 4);
  };
  EXPECT_EQ(row_set(0), row_set(1));
  EXPECT_EQ(row_set(1), row_set(2));

  EXPECT_THAT(WrapDataset("CRDDatasetWrapper", std::make_shared<Unlisted>(),
                          {{"num_negative_samples", int64_t{2}}}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("targets")));
}

TEST(DatasetGetTest, RejectsBadIndices) {
  absl::StatusOr<std::shared_ptr<Dataset>> dataset =
      MakeDataset("synthetic", {{"num_samples", int64_t{10}}});
  ASSERT_THAT(dataset, IsOk());
  EXPECT_THROW((*dataset)->Get(at::tensor({0, 10}, at::kLong), uint64_t{0}), c10::Error);
  EXPECT_THROW((*dataset)->Get(at::tensor({-1}, at::kLong), uint64_t{0}), c10::Error);
  EXPECT_THROW((*dataset)->Get(at::tensor({1, 2}, at::kInt), uint64_t{0}), c10::Error);
  EXPECT_THROW((*dataset)->Get(at::zeros({2, 2}, at::kLong), uint64_t{0}), c10::Error);
  // An empty batch is fine.
  EXPECT_EQ((*dataset)->Get(at::empty({0}, at::kLong), uint64_t{0}).samples.toTensor().size(0), 0);
}

TEST(TransformSeedTest, DiffersInEachArgument) {
  std::set<uint64_t> seeds;
  for (uint64_t seed : {0, 1}) {
    for (int64_t epoch : {0, 1, 2}) {
      for (int64_t batch : {0, 1, 2, 100}) seeds.insert(TransformSeed(seed, epoch, batch));
    }
  }
  EXPECT_EQ(seeds.size(), 2u * 3u * 4u);
  EXPECT_EQ(TransformSeed(5, 6, 7), TransformSeed(5, 6, 7));
}

// Synthetic: deterministic, one prototype per class, learnable in a few steps.

TEST(SyntheticDatasetTest, EqualKwargsGiveEqualData) {
  const Kwargs kwargs = {{"num_samples", int64_t{64}}, {"seed", int64_t{3}}};
  absl::StatusOr<std::shared_ptr<Dataset>> a = MakeDataset("synthetic", kwargs);
  absl::StatusOr<std::shared_ptr<Dataset>> b = MakeDataset("synthetic", kwargs);
  absl::StatusOr<std::shared_ptr<Dataset>> other =
      MakeDataset("synthetic", {{"num_samples", int64_t{64}}, {"seed", int64_t{4}}});
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  ASSERT_THAT(other, IsOk());
  const at::Tensor all = at::arange(64, at::kLong);
  // The generator is ignored: the synthetic dataset has no random transforms.
  const at::Tensor x = (*a)->Get(all, uint64_t{0}).samples.toTensor();
  EXPECT_TRUE(x.equal((*b)->Get(all, uint64_t{99}).samples.toTensor()));
  EXPECT_FALSE(x.equal((*other)->Get(all, uint64_t{0}).samples.toTensor()));
  EXPECT_EQ((*a)->size(), 64);
  EXPECT_EQ((*a)->num_classes(), 10);
  EXPECT_EQ(x.sizes(), at::IntArrayRef({64, 1, 28, 28}));
}

TEST(SyntheticDatasetTest, ClassesHaveDistinctPrototypes) {
  absl::StatusOr<std::shared_ptr<Dataset>> dataset =
      MakeDataset("synthetic", {{"num_samples", int64_t{100}}, {"noise", 0.0}});
  ASSERT_THAT(dataset, IsOk());
  const Batch batch = (*dataset)->Get(at::arange(100, at::kLong), uint64_t{0});
  const at::Tensor x = batch.samples.toTensor().flatten(1);
  // Without noise, every sample of a class is its prototype, and prototypes are far apart
  // (standard normal pixels: squared distance about 2 * 784).
  for (int64_t i = 0; i < 100; ++i) {
    EXPECT_TRUE(x[i].equal(x[i % 10])) << i;
  }
  const at::Tensor prototypes = x.slice(0, 0, 10);
  const at::Tensor distances = at::cdist(prototypes, prototypes);
  const at::Tensor off_diagonal = distances + at::eye(10) * 1e6;
  EXPECT_GT(off_diagonal.min().item<double>(), 20.0);
}

TEST(SyntheticDatasetTest, SoftmaxRegressionLearnsItInAFewSteps) {
  absl::StatusOr<std::shared_ptr<Dataset>> dataset =
      MakeDataset("synthetic", {{"num_samples", int64_t{1000}}, {"seed", int64_t{1}}});
  ASSERT_THAT(dataset, IsOk());
  const Batch train = (*dataset)->Get(at::arange(0, 500, at::kLong), uint64_t{0});
  const Batch held_out = (*dataset)->Get(at::arange(500, 1000, at::kLong), uint64_t{0});
  const at::Tensor x = train.samples.toTensor().flatten(1);
  const at::Tensor y = at::one_hot(train.targets.toTensor(), 10).to(at::kFloat);
  // Linear softmax regression, full-batch gradient descent with the cross-entropy gradient
  // X^T (softmax(XW) - Y) / N written out.
  at::Tensor w = at::zeros({x.size(1), 10});
  for (int step = 0; step < 3; ++step) {
    const at::Tensor p = at::softmax(x.matmul(w), 1);
    w -= 0.01 * x.t().matmul(p - y) / x.size(0);
  }
  const at::Tensor predicted = held_out.samples.toTensor().flatten(1).matmul(w).argmax(1);
  const double accuracy =
      predicted.eq(held_out.targets.toTensor()).to(at::kFloat).mean().item<double>();
  EXPECT_GE(accuracy, 0.95);
}

}  // namespace
}  // namespace kd
