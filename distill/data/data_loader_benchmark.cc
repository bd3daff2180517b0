// What assembling a batch costs: Fashion-MNIST (when installed) without and with augmentation,
// and the synthetic dataset, through DataLoader::GetBatch; and crop + flip by CropAndFlip
// against the same transform composed of tensor ops (the reason CropAndFlip is a loop kernel).
//
//   bazel run -c opt //distill/data:data_loader_benchmark
#include <cstdint>
#include <memory>
#include <string>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "benchmark/benchmark.h"
#include "distill/data/data_loader.h"
#include "distill/data/dataset.h"
#include "distill/data/image_transforms.h"

namespace kd {
namespace {

void RunBatches(benchmark::State& state, const std::string& key, const Kwargs& kwargs) {
  absl::StatusOr<std::shared_ptr<Dataset>> dataset = MakeDataset(key, kwargs);
  if (!dataset.ok()) {
    state.SkipWithError(std::string(dataset.status().message()).c_str());
    return;
  }
  absl::StatusOr<DataLoader> loader =
      DataLoader::Create(*dataset, {.batch_size = state.range(0), .shuffle = true});
  if (!loader.ok()) {
    state.SkipWithError(std::string(loader.status().message()).c_str());
    return;
  }
  int64_t i = 0;
  for (auto _ : state) {
    Batch batch = loader->GetBatch(i);
    benchmark::DoNotOptimize(batch.samples.toTensor().data_ptr<float>());
    i = (i + 1) % loader->num_batches();
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_FashionMnistBatch(benchmark::State& state) { RunBatches(state, "fashion_mnist", {}); }
BENCHMARK(BM_FashionMnistBatch)->Arg(128)->Unit(benchmark::kMicrosecond);

void BM_FashionMnistAugmentedBatch(benchmark::State& state) {
  RunBatches(state, "fashion_mnist",
             {{"mean", 0.2860},
              {"std", 0.3530},
              {"random_crop_padding", int64_t{4}},
              {"horizontal_flip", true}});
}
BENCHMARK(BM_FashionMnistAugmentedBatch)->Arg(128)->Unit(benchmark::kMicrosecond);

void BM_SyntheticBatch(benchmark::State& state) {
  RunBatches(state, "synthetic", {{"num_samples", int64_t{4096}}});
}
BENCHMARK(BM_SyntheticBatch)->Arg(128)->Unit(benchmark::kMicrosecond);

// A uint8 batch (B, 1, 28, 28) and random crop corners (padding 4) and flips for it.
struct CropFlipInputs {
  explicit CropFlipInputs(int64_t b) {
    at::Generator gen = at::detail::createCPUGenerator(0);
    images = at::randint(0, 256, {b, 1, 28, 28}, gen, at::kByte);
    top = at::randint(0, 9, {b}, gen);
    left = at::randint(0, 9, {b}, gen);
    flip = at::rand({b}, gen).lt(0.5);
  }
  at::Tensor images, top, left, flip;
};

void BM_CropAndFlip(benchmark::State& state) {
  const CropFlipInputs in(state.range(0));
  for (auto _ : state) {
    benchmark::DoNotOptimize(CropAndFlip(in.images, 4, in.top, in.left, in.flip).data_ptr());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_CropAndFlip)->Arg(128)->Unit(benchmark::kMicrosecond);

// The same transform as tensor ops: pad, gather at flat (row, column) indices, flip, where.
void BM_CropAndFlipTensorOps(benchmark::State& state) {
  const CropFlipInputs in(state.range(0));
  const int64_t b = state.range(0), h = 28, w = 28, p = 4, padded_w = w + 2 * p;
  for (auto _ : state) {
    const at::Tensor padded = at::constant_pad_nd(in.images, {p, p, p, p}, 0).reshape({b, 1, -1});
    const at::Tensor rows = in.top.view({b, 1}) + at::arange(h, at::kLong);
    const at::Tensor cols = in.left.view({b, 1}) + at::arange(w, at::kLong);
    const at::Tensor flat = (rows.unsqueeze(2) * padded_w + cols.unsqueeze(1)).view({b, 1, -1});
    const at::Tensor crop = padded.gather(2, flat).view({b, 1, h, w});
    const at::Tensor out = at::where(in.flip.view({b, 1, 1, 1}), crop.flip({3}), crop);
    benchmark::DoNotOptimize(out.data_ptr());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_CropAndFlipTensorOps)->Arg(128)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kd
