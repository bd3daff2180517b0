#include "distill/data/image_transforms.h"

#include <set>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace {

using test::IValueNear;

// The hand-made image: one channel, 3 x 3, pixels 1..9 row by row.
at::Tensor Image123() { return at::arange(1, 10, at::kByte).view({1, 1, 3, 3}); }

// The crop of `image` (1, C, H, W) padded by `pad` at corner (top, left), mirrored if `flip`,
// pixel by pixel.
at::Tensor Reference(const at::Tensor& image, int64_t pad, int64_t top, int64_t left,
                     bool flip = false) {
  const int64_t c = image.size(1), h = image.size(2), w = image.size(3);
  at::Tensor out = at::zeros_like(image);
  auto src = image.accessor<uint8_t, 4>();
  auto dst = out.accessor<uint8_t, 4>();
  for (int64_t k = 0; k < c; ++k) {
    for (int64_t i = 0; i < h; ++i) {
      for (int64_t j = 0; j < w; ++j) {
        const int64_t y = top + i - pad, x = left + (flip ? w - 1 - j : j) - pad;
        if (y >= 0 && y < h && x >= 0 && x < w) dst[0][k][i][j] = src[0][k][y][x];
      }
    }
  }
  return out;
}

at::Tensor Longs(std::vector<int64_t> values) { return at::tensor(values, at::kLong); }
at::Tensor Bools(std::vector<int64_t> values) { return Longs(values).to(at::kBool); }

TEST(CropAndFlipTest, HandMadeImage) {
  // Padded by 1, the 5 x 5 image is
  //   0 0 0 0 0
  //   0 1 2 3 0
  //   0 4 5 6 0
  //   0 7 8 9 0
  //   0 0 0 0 0
  const at::Tensor images = Image123().repeat({5, 1, 1, 1});
  const at::Tensor out = CropAndFlip(images, 1, Longs({0, 2, 1, 1, 0}), Longs({0, 1, 1, 1, 2}),
                                     Bools({0, 0, 0, 1, 1}));
  const at::Tensor expected = at::tensor({0, 0, 0, 0, 1, 2, 0, 4, 5,   // top-left corner
                                          4, 5, 6, 7, 8, 9, 0, 0, 0,   // two down, one right
                                          1, 2, 3, 4, 5, 6, 7, 8, 9,   // centred: unchanged
                                          3, 2, 1, 6, 5, 4, 9, 8, 7,   // centred, mirrored
                                          0, 0, 0, 0, 3, 2, 0, 6, 5},  // top-right, mirrored
                                         at::kByte)
                                  .view({5, 1, 3, 3});
  EXPECT_THAT(out, IValueNear(expected, 0));
}

TEST(CropAndFlipTest, EveryCornerOfEveryChannel) {
  const at::Tensor image = at::arange(2 * 4 * 5, at::kByte).view({1, 2, 4, 5}).add(1);
  for (int64_t pad : {0, 2, 6}) {
    for (int64_t top = 0; top <= 2 * pad; ++top) {
      for (int64_t left = 0; left <= 2 * pad; ++left) {
        for (bool flip : {false, true}) {
          const at::Tensor out =
              CropAndFlip(image, pad, Longs({top}), Longs({left}), Bools({flip ? 1 : 0}));
          EXPECT_THAT(out, IValueNear(Reference(image, pad, top, left, flip), 0))
              << "padding " << pad << " corner (" << top << ", " << left << ") flip " << flip;
        }
      }
    }
  }
}

TEST(CropAndFlipTest, KeepsTheDtype) {
  const at::Tensor image = at::arange(9, at::kFloat).view({1, 1, 3, 3});
  const at::Tensor out = CropAndFlip(image, 1, Longs({1}), Longs({1}), Bools({1}));
  EXPECT_THAT(out, IValueNear(image.flip({3}), 0));
  EXPECT_EQ(out.scalar_type(), at::kFloat);
}

TEST(CropAndFlipTest, RejectsBadArguments) {
  // A corner outside the padded image.
  EXPECT_THROW(CropAndFlip(Image123(), 1, Longs({3}), Longs({0}), Bools({0})), c10::Error);
  EXPECT_THROW(CropAndFlip(Image123(), 1, Longs({0}), Longs({-1}), Bools({0})), c10::Error);
  // Two corners for one image.
  EXPECT_THROW(CropAndFlip(Image123(), 1, Longs({0, 0}), Longs({0, 0}), Bools({0, 0})), c10::Error);
  // Not (B, C, H, W).
  EXPECT_THROW(CropAndFlip(Image123().view({3, 3}), 1, Longs({0}), Longs({0}), Bools({0})),
               c10::Error);
}

TEST(RandomCropAndFlipTest, DrawsEveryCropAndBothFlipsAsSeeded) {
  const at::Tensor images = Image123().repeat({1000, 1, 1, 1});
  at::Generator gen = at::detail::createCPUGenerator(42);
  const at::Tensor out = RandomCropAndFlip(images, 1, 0.5, gen);
  ASSERT_EQ(out.sizes(), images.sizes());
  // Each output is one of the 18 crops (9 corners, mirrored or not), and all 18 occur.
  std::vector<at::Tensor> candidates;
  for (int64_t top = 0; top <= 2; ++top) {
    for (int64_t left = 0; left <= 2; ++left) {
      for (bool flip : {false, true}) {
        candidates.push_back(Reference(Image123(), 1, top, left, flip));
      }
    }
  }
  std::set<int> seen;
  int flipped = 0;
  for (int64_t b = 0; b < out.size(0); ++b) {
    int match = -1;
    for (int k = 0; k < static_cast<int>(candidates.size()); ++k) {
      if (out.slice(0, b, b + 1).equal(candidates[k])) match = k;
    }
    ASSERT_GE(match, 0) << "image " << b << " is no crop of the padded image";
    seen.insert(match);
    flipped += match % 2;
  }
  EXPECT_EQ(seen.size(), 18u);
  // Binomial(1000, 0.5): std 16; 5 std either side.
  EXPECT_NEAR(flipped, 500, 80);
  // The documented draws: tops, lefts, then flip uniforms, from one generator.
  at::Generator again = at::detail::createCPUGenerator(42);
  const at::Tensor top = at::randint(0, 3, {1000}, again);
  const at::Tensor left = at::randint(0, 3, {1000}, again);
  const at::Tensor flip = at::rand({1000}, again).lt(0.5);
  EXPECT_TRUE(CropAndFlip(images, 1, top, left, flip).equal(out));
  at::Generator other = at::detail::createCPUGenerator(43);
  EXPECT_FALSE(RandomCropAndFlip(images, 1, 0.5, other).equal(out));
}

// The reported transform id names the crop and flip each image got: decoding it and cropping
// by hand gives the image; equal ids are equal images; ids cover the 18 ways for padding 1.
TEST(RandomCropAndFlipTest, ReportsEachImagesCropAndFlip) {
  EXPECT_EQ(NumCropAndFlipTransforms(1, 0.5), 18);
  EXPECT_EQ(NumCropAndFlipTransforms(4, 0.5), 162);
  EXPECT_EQ(NumCropAndFlipTransforms(0, 0.5), 2);
  const at::Tensor images = Image123().repeat({500, 1, 1, 1});
  at::Generator gen = at::detail::createCPUGenerator(7);
  at::Tensor transform;
  const at::Tensor out = RandomCropAndFlip(images, 1, 0.5, gen, &transform);
  ASSERT_EQ(transform.sizes(), at::IntArrayRef({500}));
  ASSERT_EQ(transform.scalar_type(), at::kLong);
  std::set<int64_t> ids;
  for (int64_t b = 0; b < 500; ++b) {
    const int64_t id = transform[b].item<int64_t>();
    ASSERT_GE(id, 0);
    ASSERT_LT(id, 18);
    ids.insert(id);
    const int64_t flip = id % 2, left = (id / 2) % 3, top = id / 6;
    EXPECT_TRUE(out.slice(0, b, b + 1).equal(Reference(Image123(), 1, top, left, flip == 1)))
        << "image " << b << " (id " << id << ")";
  }
  EXPECT_EQ(ids.size(), 18u);
  // The same draws with and without the report.
  at::Generator again = at::detail::createCPUGenerator(7);
  EXPECT_TRUE(RandomCropAndFlip(images, 1, 0.5, again).equal(out));
  // Nothing random: every id 0.
  at::Tensor none;
  RandomCropAndFlip(images, 0, 0.0, gen, &none);
  EXPECT_TRUE(none.eq(0).all().item<bool>());
}

TEST(RandomCropAndFlipTest, FlipProbabilityAndNoOp) {
  const at::Tensor images = Image123().repeat({100, 1, 1, 1});
  at::Generator gen = at::detail::createCPUGenerator(0);
  EXPECT_TRUE(RandomCropAndFlip(images, 0, 0.0, gen).equal(images));
  EXPECT_TRUE(RandomCropAndFlip(images, 0, 1.0, gen).equal(images.flip({3})));
  // Flips only: the crop is the identity.
  const at::Tensor some = RandomCropAndFlip(images, 0, 0.5, gen);
  const at::Tensor is_flipped = some.eq(images.flip({3})).flatten(1).all(1);
  const at::Tensor is_same = some.eq(images).flatten(1).all(1);
  EXPECT_TRUE(is_flipped.logical_or(is_same).all().item<bool>());
  EXPECT_GT(is_flipped.sum().item<int64_t>(), 20);
  EXPECT_GT(is_same.sum().item<int64_t>(), 20);
}

TEST(ScaleAndNormalizeTest, ScalesToUnitThenNormalizes) {
  const at::Tensor pixels = at::tensor({0, 255, 51}, at::kByte).view({1, 1, 1, 3});
  // ToTensor: 0, 1, 0.2; Normalize(0.5, 0.25): -2, 2, -1.2.
  EXPECT_THAT(ScaleAndNormalize(pixels, 0, 1),
              IValueNear(at::tensor({0.0f, 1.0f, 0.2f}).view({1, 1, 1, 3}), 1e-6));
  EXPECT_THAT(ScaleAndNormalize(pixels, 0.5, 0.25),
              IValueNear(at::tensor({-2.0f, 2.0f, -1.2f}).view({1, 1, 1, 3}), 1e-6));
  EXPECT_EQ(ScaleAndNormalize(pixels, 0, 1).scalar_type(), at::kFloat);
}

}  // namespace
}  // namespace kd
