#include "distill/data/data_loader.h"

#include <dlfcn.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kd {

absl::StatusOr<DataLoader> DataLoader::Create(std::shared_ptr<const Dataset> dataset,
                                              DataLoaderOptions options) {
  if (dataset == nullptr) return absl::InvalidArgumentError("DataLoader: the dataset is null");
  if (options.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DataLoader: batch_size must be >= 1; got ", options.batch_size));
  }
  if (options.sampler != nullptr) {
    if (absl::Status fits = options.sampler->CheckDatasetSize(dataset->size()); !fits.ok()) {
      return fits;
    }
  }
  if (options.num_replicas < 1 || options.rank < 0 || options.rank >= options.num_replicas) {
    return absl::InvalidArgumentError(
        absl::StrCat("DataLoader: rank ", options.rank,
                     " is not in [0, num_replicas=", options.num_replicas, ")"));
  }
  return DataLoader(std::move(dataset), options);
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  SetEpoch(0);
}

void DataLoader::SetEpoch(int64_t epoch) {
  epoch_ = epoch;
  at::Tensor order;
  if (options_.sampler != nullptr) {
    order = options_.sampler->Order(dataset_->size(), options_.seed, epoch);
  } else if (!options_.shuffle) {
    if (order_.defined() && options_.num_replicas == 1) return;  // the same every epoch
    order = at::arange(dataset_->size(), at::kLong);
  } else {
    // torch.utils.data.DistributedSampler: g.manual_seed(seed + epoch); randperm(n, generator=g).
    at::Generator generator =
        at::detail::createCPUGenerator(options_.seed + static_cast<uint64_t>(epoch));
    order = at::randperm(dataset_->size(), generator, at::kLong);
  }
  const int64_t n = order.size(0);
  const int64_t replicas = options_.num_replicas;
  const bool drop_uneven = options_.drop_uneven ||
                           (options_.sampler != nullptr && options_.sampler->drops_uneven_tail());
  if (replicas > 1 && options_.exact_shards) {
    order = order.slice(/*dim=*/0, options_.rank, n, replicas).contiguous();
  } else if (replicas > 1 && n > 0) {
    // DistributedSampler's shard: pad (repeating the order) or cut to a multiple of the
    // replicas, then every replicas-th position from the rank.
    const int64_t per_rank = drop_uneven && n % replicas != 0
                                 ? (n - replicas + replicas - 1) / replicas
                                 : (n + replicas - 1) / replicas;
    const int64_t total = per_rank * replicas;
    if (total > n) {
      order = order.repeat({(total + n - 1) / n}).slice(/*dim=*/0, 0, total);
    } else {
      order = order.slice(/*dim=*/0, 0, total);
    }
    order = order.slice(/*dim=*/0, options_.rank, total, replicas).contiguous();
  }
  order_ = order;
}

int64_t DataLoader::num_batches() const {
  const int64_t n = order_.size(0);
  const int64_t b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

at::Tensor DataLoader::BatchIndices(int64_t i) const {
  TORCH_CHECK(i >= 0 && i < num_batches(), "DataLoader: batch ", i, " is out of range [0, ",
              num_batches(), ")");
  const int64_t start = i * options_.batch_size;
  const int64_t stop = std::min(start + options_.batch_size, order_.size(0));
  return order_.slice(/*dim=*/0, start, stop);
}

Batch DataLoader::GetBatch(int64_t i) const {
  return dataset_->Get(BatchIndices(i), TransformSeed(options_.seed, epoch_, i));
}

namespace {

// Runs the calling thread's kernels on one intra-op thread. With libtorch's OpenMP backend the
// thread count is OpenMP's per-thread ICV: libtorch sets it from the global count the first
// time a thread asks (at::get_num_threads does), and reads it back with omp_get_max_threads.
// So: let libtorch set it, then lower it for this thread alone through the OpenMP runtime
// libtorch loaded (at::set_num_threads would change the global count, every thread's).
// c10::ParallelGuard does not do it: at::in_parallel_region() ignores it under OpenMP.
void UseOneIntraOpThread() {
  if (at::get_num_threads() <= 1) return;
  using SetNumThreads = void (*)(int);
  static const auto omp_set_num_threads =
      reinterpret_cast<SetNumThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (omp_set_num_threads != nullptr) omp_set_num_threads(1);
}

}  // namespace

// What the workers and the consumer share.
struct BatchStream::Shared {
  std::mutex mu;
  std::condition_variable changed;  // a batch is ready, one was taken, or stop
  std::map<int64_t, Batch> ready;
  std::map<int64_t, std::exception_ptr> failed;
  int64_t taken = 0;  // batches taken so far: the window's start
  bool stop = false;
  int64_t window = 0;  // batches that may be ready ahead of the next one taken
  int64_t first = 0;   // the stream's first batch
  int64_t stride = 1;  // the number of workers: worker w assembles batches first + w + k * stride
  std::vector<std::thread> workers;
};

BatchStream::BatchStream(const DataLoader& loader, int64_t first)
    : loader_(loader), next_(first), end_(loader.num_batches()) {
  const int workers = loader.options().num_workers;
  if (workers <= 0 || next_ >= end_) return;
  shared_ = std::make_unique<Shared>();
  shared_->taken = next_;
  shared_->first = next_;
  shared_->stride = workers;
  shared_->window = static_cast<int64_t>(workers) * std::max(1, loader.options().prefetch_factor);
  shared_->workers.reserve(static_cast<size_t>(workers));
  for (int w = 0; w < workers; ++w) shared_->workers.emplace_back([this, w] { Work(w); });
}

BatchStream::~BatchStream() {
  if (shared_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->stop = true;
  }
  shared_->changed.notify_all();
  for (std::thread& worker : shared_->workers) worker.join();
}

void BatchStream::Work(int worker) {
  // Worker threads assemble batches with serial kernels: the training thread owns the intra-op
  // threads (PyTorch's worker processes call torch.set_num_threads(1) likewise).
  UseOneIntraOpThread();
  Shared& shared = *shared_;
  for (int64_t i = shared.first + worker; i < end_; i += shared.stride) {
    {
      std::unique_lock<std::mutex> lock(shared.mu);
      shared.changed.wait(lock, [&] { return shared.stop || i < shared.taken + shared.window; });
      if (shared.stop) return;
    }
    Batch batch;
    std::exception_ptr error;
    try {
      batch = loader_.GetBatch(i);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(shared.mu);
      if (error != nullptr) {
        shared.failed.emplace(i, error);
      } else {
        shared.ready.emplace(i, std::move(batch));
      }
    }
    shared.changed.notify_all();
    if (error != nullptr) return;  // the consumer rethrows it; later batches are not needed
  }
}

Batch BatchStream::Next() {
  TORCH_CHECK(!done(), "BatchStream: no batch left (", end_, " in this epoch)");
  if (shared_ == nullptr) return loader_.GetBatch(next_++);
  Shared& shared = *shared_;
  std::unique_lock<std::mutex> lock(shared.mu);
  shared.changed.wait(lock,
                      [&] { return shared.ready.count(next_) || shared.failed.count(next_); });
  if (auto it = shared.failed.find(next_); it != shared.failed.end()) {
    std::rethrow_exception(it->second);
  }
  auto it = shared.ready.find(next_);
  Batch batch = std::move(it->second);
  shared.ready.erase(it);
  shared.taken = ++next_;
  lock.unlock();
  shared.changed.notify_all();
  return batch;
}

}  // namespace kd
