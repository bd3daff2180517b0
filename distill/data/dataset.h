// Datasets: the interface, the dataset registry and how a config builds one.
//
//   // A dataset registers itself under its config key, with its kwargs contract:
//   KD_REGISTER(kd::DatasetRegistry(), "fashion_mnist", MakeFashionMnist,
//               {{.name = "split", .type = kd::KwargType::kString,
//                 .choices = {"train", "test"}}, ...});
//
//   KD_ASSIGN_OR_RETURN(std::shared_ptr<kd::Dataset> train,
//                       kd::MakeDataset("fashion_mnist", {{"split", "train"}}));
//   kd::Batch batch = train->Get(at::arange(128), kd::TransformSeed(seed, epoch, 0));
//   // batch.samples: float (128, 1, 28, 28); batch.targets: int64 (128);
//   // batch.supp: Dict[str, Tensor] {"indices": int64 (128)} (CRD's pos_idx).
//
// A dataset is random access by a tensor of indices: it gathers the samples of a whole batch
// at once (index_select on tensors held in memory) and applies its transforms to the batch,
// vectorized. Random transforms draw only from the generator passed in, so a batch is a
// function of (indices, seed): kd::DataLoader seeds it from (seed, epoch, batch index) and a
// resumed run reproduces its batches exactly.
//
// Errors: building a dataset (reading its files, checking kwargs) returns a status; Get with
// indices that are not a 1-D int64 tensor within [0, size()) is a programming error and throws
// c10::Error, like libtorch's own index_select.
#ifndef LIBKD_DISTILL_DATA_DATASET_H_
#define LIBKD_DISTILL_DATA_DATASET_H_

#include <cstdint>
#include <functional>
#include <memory>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/ivalue_util.h"
#include "base/registry.h"
#include "distill/config/kwargs.h"
#include "distill/data/batch.h"

namespace kd {

// A labelled dataset, random access by batches of indices: images with class labels, or token
// windows with their labels (token_dataset.h). Get is const and safe to call from several
// threads at once.
class Dataset {
 public:
  virtual ~Dataset() = default;

  // The number of samples.
  virtual int64_t size() const = 0;
  // The number of classes (a token dataset's: the vocabulary's size); targets are in
  // [0, num_classes()) (a token dataset's also -100 where no loss is taken).
  virtual int64_t num_classes() const = 0;
  // Every sample's target, int64 (size()), without loading or transforming the samples
  // (torchdistill's dataset.targets, which CRDDatasetWrapper reads). Unimplemented by default:
  // a dataset that holds its labels says so.
  virtual absl::StatusOr<at::Tensor> ListTargets() const;

  // How many different ways the dataset's random transforms can turn one sample, each way
  // reported per sample in the batch's supplementary dict as "transform" (int64 (B), in
  // [0, NumTransforms())), so that (index, transform) names exactly the tensor a sample
  // became: what StageConfig.teacher_cache keys on. 1 for a dataset without random
  // transforms (no "transform" needed); 0, the default, for one that does not report them.
  virtual int64_t NumTransforms() const { return 0; }

  // The samples at `indices` (1-D int64, each in [0, size()), repeats allowed) with the
  // dataset's transforms applied, their random choices drawn from `generator` (a CPU
  // generator): samples float (B, C, H, W) and targets int64 (B) for images; input_ids and
  // labels int64 (B, T) for token windows (supp adds "attention_mask"); supp a Dict[str, Tensor]
  // {"indices": the indices, ...}. Throws c10::Error for indices out of range or of another
  // dtype.
  Batch Get(const at::Tensor& indices, at::Generator generator) const;
  // As above, with a fresh CPU generator seeded with `seed` (see TransformSeed).
  Batch Get(const at::Tensor& indices, uint64_t seed) const;

 protected:
  // The transformed samples and the targets at `indices` (checked already: 1-D, int64, in
  // range, on the CPU).
  struct Samples {
    at::Tensor samples;  // float (B, C, H, W) (a wrapper's views (B, V, C, H, W)); ids (B, T)
    at::Tensor targets;  // int64 (B); labels (B, T)
    // More of the batch's supplementary dict (a wrapper's: CRD's pos_idx, contrast_idx).
    c10::Dict<std::string, at::Tensor> supp = c10::Dict<std::string, at::Tensor>();
  };
  virtual Samples GetSamples(const at::Tensor& indices, at::Generator& generator) const = 0;
};

// The seed of the transforms of batch `batch_index` in `epoch` of a run seeded with `seed`: a
// hash (splitmix64) of the three, so neighbouring batches and epochs draw unrelated numbers.
uint64_t TransformSeed(uint64_t seed, int64_t epoch, int64_t batch_index);

// The supplementary dict's key of each sample's transform id (Dataset::NumTransforms).
inline constexpr char kTransformKey[] = "transform";

// Builds a dataset from its kwargs (checked against the registration's contract already).
using DatasetFactory =
    std::function<absl::StatusOr<std::shared_ptr<Dataset>>(const Kwargs& kwargs)>;

// The datasets by config key (registry kind "dataset", DatasetConfig.key).
Registry<DatasetFactory>& DatasetRegistry();

// The dataset registered as `key` built with `kwargs`: NotFound for an unknown key (naming the
// nearest and listing all), InvalidArgument for kwargs that break the dataset's contract, and
// the factory's own errors (NotFound for missing files, DataLoss for corrupt ones, ...).
absl::StatusOr<std::shared_ptr<Dataset>> MakeDataset(absl::string_view key, const Kwargs& kwargs);

// The samples [start, stop) of `dataset` as a dataset of their own, as
// torch.utils.data.Subset(dataset, range(start, stop)): sample i is the dataset's sample
// start + i, transformed as the dataset transforms it; the batch's supp "indices" count within
// the subset. `stop` 0 means the dataset's size. InvalidArgument unless
// 0 <= start < stop <= dataset->size().
absl::StatusOr<std::shared_ptr<Dataset>> SubsetOf(std::shared_ptr<const Dataset> dataset,
                                                  int64_t start, int64_t stop);

// How RandomSplitOf reads its lengths.
enum class LengthsRule {
  // torch.utils.data.random_split's: sample counts summing to the dataset's size, or fractions
  // summing to 1 (floors, the remainder one each to the first parts).
  kTorch,
  // torchdistill's split_dataset's: counts where they sum to the dataset's size, else ratios of
  // it (each part int(length / sum * size), the last one the rest).
  kSplitDataset,
};

// Part `part` of torch.utils.data.random_split(dataset, lengths, a generator seeded `seed`): the
// same samples in the same order as Python's, `lengths` read by `rule`. InvalidArgument naming
// the fault.
absl::StatusOr<std::shared_ptr<Dataset>> RandomSplitOf(std::shared_ptr<const Dataset> dataset,
                                                       const std::vector<double>& lengths,
                                                       int64_t seed, int part,
                                                       LengthsRule rule = LengthsRule::kTorch);

// What `batch` (a wrapped dataset's) adds to its supplementary dict besides "indices": the
// entries a wrapper's Samples.supp passes on.
c10::Dict<std::string, at::Tensor> AddedSupp(const Batch& batch);

// Wraps a dataset in another (torchdistill's dataset wrappers, DatasetConfig.wrapper), from
// the wrapper's kwargs (checked against its registration's contract already).
using DatasetWrapperFactory = std::function<absl::StatusOr<std::shared_ptr<Dataset>>(
    std::shared_ptr<const Dataset> dataset, const Kwargs& kwargs)>;

// The dataset wrappers by config key (registry kind "dataset_wrapper"). Registered:
// "CRDDatasetWrapper": adds CRD's "pos_idx" (B) and "contrast_idx" (B, 1 + K) to the batch's
// supplementary dict: the positive (the sample itself, mode "exact", or a random sample of its
// class, "relax") and K = num_negative_samples samples of other classes, drawn without
// replacement (with, when fewer exist) from the generator; `ratio` in (0, 1) keeps that share
// of each class's negatives, drawn once from `seed`. Needs the wrapped dataset's ListTargets().
// "SSKDDatasetWrapper": each sample as four views, itself and its rotations by 90, 180 and 270
// degrees (counter-clockwise, as PIL's rotate), samples (B, 4, C, H, W) for square images,
// which forward_batch4sskd runs as (4B, C, H, W), rows sample-major. The views share the
// wrapped dataset's random transforms (torchdistill draws them per view).
Registry<DatasetWrapperFactory>& DatasetWrapperRegistry();

// `dataset` wrapped by the wrapper registered as `key`: NotFound for an unknown key,
// InvalidArgument for kwargs against its contract, and the wrapper's own errors.
absl::StatusOr<std::shared_ptr<Dataset>> WrapDataset(absl::string_view key,
                                                     std::shared_ptr<const Dataset> dataset,
                                                     const Kwargs& kwargs);

}  // namespace kd

#endif  // LIBKD_DISTILL_DATA_DATASET_H_
