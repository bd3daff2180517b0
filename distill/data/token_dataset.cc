// Token windows over ids in a memory-mapped file or in memory, and the "token_file" dataset.
#include "distill/data/token_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/kwargs.h"
#include "base/registry.h"
#include "base/status_macros.h"

namespace kd {
namespace {

// Ids are read in place (mmap), so the file's byte order must be the machine's.
static_assert(std::endian::native == std::endian::little,
              "token files hold little-endian ids, read in place: add a byte swap for this host");

constexpr char kKey[] = "token_file";

// Where the ids live: a read-only mapping of a file, or a vector. Immutable once built, so
// reads from several threads need no lock.
class TokenStore {
 public:
  virtual ~TokenStore() = default;
  const void* data() const { return data_; }
  int64_t size() const { return size_; }
  TokenDtype dtype() const { return dtype_; }

 protected:
  const void* data_ = nullptr;
  int64_t size_ = 0;
  TokenDtype dtype_ = TokenDtype::kUInt16;
};

class MappedStore final : public TokenStore {
 public:
  MappedStore(void* mapping, size_t bytes, TokenDtype dtype, int64_t size)
      : mapping_(mapping), bytes_(bytes) {
    data_ = mapping;
    size_ = size;
    dtype_ = dtype;
  }
  ~MappedStore() override { ::munmap(mapping_, bytes_); }

 private:
  void* mapping_;
  size_t bytes_;
};

class VectorStore final : public TokenStore {
 public:
  explicit VectorStore(std::vector<uint32_t> ids) : ids_(std::move(ids)) {
    data_ = ids_.data();
    size_ = static_cast<int64_t>(ids_.size());
    dtype_ = TokenDtype::kUInt32;
  }

 private:
  std::vector<uint32_t> ids_;
};

// Calls fn(ids) with the store's ids as a typed pointer.
template <typename Fn>
auto WithIds(const TokenStore& store, Fn&& fn) {
  if (store.dtype() == TokenDtype::kUInt16) {
    return fn(static_cast<const uint16_t*>(store.data()));
  }
  return fn(static_cast<const uint32_t*>(store.data()));
}

// Windows of documents mode: where each starts and how many ids it holds (<= block_size).
struct Windows {
  std::vector<int64_t> starts;
  std::vector<int32_t> lengths;
};

class TokenDataset final : public Dataset {
 public:
  TokenDataset(std::unique_ptr<const TokenStore> store, TokenWindowOptions options, Windows windows)
      : store_(std::move(store)), options_(options), windows_(std::move(windows)) {}

  int64_t size() const override {
    return documents() ? static_cast<int64_t>(windows_.starts.size())
                       : store_->size() / options_.block_size;
  }
  int64_t num_classes() const override { return options_.vocab_size; }
  int64_t NumTransforms() const override { return 1; }  // no random transforms

 protected:
  Samples GetSamples(const at::Tensor& indices, at::Generator&) const override {
    const int64_t n = indices.size(0), t = options_.block_size;
    at::Tensor input_ids = at::empty({n, t}, at::kLong);
    at::Tensor labels = at::empty({n, t}, at::kLong);
    at::Tensor mask = at::ones({n, t}, at::kLong);
    const at::Tensor rows = indices.contiguous();
    const int64_t* row = rows.data_ptr<int64_t>();
    int64_t* ids_out = input_ids.data_ptr<int64_t>();
    int64_t* labels_out = labels.data_ptr<int64_t>();
    int64_t* mask_out = mask.data_ptr<int64_t>();
    WithIds(*store_, [&](const auto* ids) {
      for (int64_t r = 0; r < n; ++r) {
        const int64_t w = row[r];
        const int64_t start = documents() ? windows_.starts[w] : w * t;
        const int64_t length = documents() ? windows_.lengths[w] : t;
        int64_t* out = ids_out + r * t;
        for (int64_t i = 0; i < length; ++i) out[i] = static_cast<int64_t>(ids[start + i]);
        std::copy(out, out + length, labels_out + r * t);
        std::fill(out + length, out + t, options_.pad_id);
        std::fill(labels_out + r * t + length, labels_out + (r + 1) * t, kIgnoreIndex);
        std::fill(mask_out + r * t + length, mask_out + (r + 1) * t, int64_t{0});
      }
    });
    c10::Dict<std::string, at::Tensor> supp;
    supp.insert(kAttentionMaskKey, std::move(mask));
    return {std::move(input_ids), std::move(labels), std::move(supp)};
  }

 private:
  bool documents() const { return options_.eos_id >= 0; }

  std::unique_ptr<const TokenStore> store_;
  TokenWindowOptions options_;
  Windows windows_;  // documents mode only
};

absl::Status CheckOptions(const TokenWindowOptions& options) {
  if (options.block_size < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size must be >= 2 (a window of one token has nothing to predict); got ",
                     options.block_size));
  }
  if (options.vocab_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab_size must be >= 1; got ", options.vocab_size));
  }
  for (const auto& [name, id] :
       {std::pair<const char*, int64_t>{"eos_id", options.eos_id}, {"pad_id", options.pad_id}}) {
    if (id < -1 || id >= options.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be in [0, vocab_size ",
                                                     options.vocab_size, ") or -1; got ", id));
    }
  }
  if (options.pad_id >= 0 && options.eos_id < 0) {
    return absl::InvalidArgumentError(
        "pad_id pads the last window of a document: give eos_id (documents mode) too, or drop "
        "pad_id");
  }
  return absl::OkStatus();
}

// Checks every id against the vocabulary and, in documents mode, lists the windows.
absl::StatusOr<Windows> ScanIds(const TokenStore& store, const TokenWindowOptions& options) {
  const int64_t n = store.size(), t = options.block_size;
  const int64_t vocab = options.vocab_size;
  return WithIds(store, [&](const auto* ids) -> absl::StatusOr<Windows> {
    // The vocabulary first, in one tight pass (a file of billions of ids is read once).
    for (int64_t i = 0; i < n; ++i) {
      if (static_cast<int64_t>(ids[i]) >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the id at position ", i, " is ", static_cast<int64_t>(ids[i]),
            ", not below vocab_size ", vocab,
            ": give the tokenizer's vocab_size (meta.json's), or the file's dtype if it is not "
            "that of the kwarg"));
      }
    }
    Windows windows;
    if (options.eos_id < 0) return windows;
    const uint32_t eos = static_cast<uint32_t>(options.eos_id);
    int64_t doc_start = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (ids[i] != eos && i != n - 1) continue;
      for (int64_t s = doc_start; s <= i; s += t) {
        windows.starts.push_back(s);
        windows.lengths.push_back(static_cast<int32_t>(std::min(t, i + 1 - s)));
      }
      doc_start = i + 1;
    }
    return windows;
  });
}

absl::StatusOr<std::shared_ptr<Dataset>> MakeFromStore(std::unique_ptr<TokenStore> store,
                                                       TokenWindowOptions options,
                                                       absl::string_view name) {
  KD_RETURN_IF_ERROR(WithContext(name, CheckOptions(options)));
  if (options.eos_id >= 0 && options.pad_id < 0) options.pad_id = options.eos_id;
  if (store->size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name,
                     ": holds no tokens; give a file of token ids (//tools:tokenize "
                     "writes them)"));
  }
  if (options.eos_id < 0 && store->size() < options.block_size) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": holds ", store->size(),
                                                   " tokens, fewer than one window of "
                                                   "block_size ",
                                                   options.block_size,
                                                   "; lower block_size or give more data"));
  }
  KD_ASSIGN_OR_RETURN(Windows windows, WithContext(name, ScanIds(*store, options)));
  return std::make_shared<TokenDataset>(std::move(store), options, std::move(windows));
}

}  // namespace

absl::string_view TokenDtypeName(TokenDtype dtype) {
  return dtype == TokenDtype::kUInt16 ? "uint16" : "uint32";
}

absl::StatusOr<std::shared_ptr<Dataset>> OpenTokenFile(const std::string& path, TokenDtype dtype,
                                                       const TokenWindowOptions& options) {
  const std::string name = absl::StrCat(kKey, ": ", path);
  if (absl::Status regular = CheckRegularFile(path); !regular.ok()) {
    if (absl::IsNotFound(regular)) {
      return absl::NotFoundError(absl::StrCat(
          kKey, ": no file ", path,
          "; write one with bazel run //tools:tokenize -- "
          "--corpus=<text> --out_dir=<folder> (its train.bin, val.bin, test.bin), or correct "
          "the kwarg path"));
    }
    return WithContext(kKey, regular);
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(name, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat(name, ": cannot stat: ", std::strerror(err)));
  }
  const int64_t bytes = st.st_size;
  const int64_t width = dtype == TokenDtype::kUInt16 ? 2 : 4;
  if (bytes % width != 0) {
    ::close(fd);
    return absl::DataLossError(
        absl::StrCat(name, ": holds ", bytes, " bytes, not a whole number of ", width, "-byte ",
                     TokenDtypeName(dtype), " ids: the file is cut short, or its ids are ",
                     dtype == TokenDtype::kUInt16 ? "uint32 (give dtype \"uint32\")"
                                                  : "uint16 (give dtype \"uint16\")"));
  }
  void* mapping = nullptr;
  if (bytes > 0) {
    mapping = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_SHARED, fd, 0);
    if (mapping == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return absl::UnavailableError(absl::StrCat(name, ": cannot map: ", std::strerror(err)));
    }
  }
  ::close(fd);  // the mapping keeps the file
  std::unique_ptr<TokenStore> store;
  if (bytes > 0) {
    store =
        std::make_unique<MappedStore>(mapping, static_cast<size_t>(bytes), dtype, bytes / width);
  } else {
    store = std::make_unique<VectorStore>(std::vector<uint32_t>());
  }
  return MakeFromStore(std::move(store), options, name);
}

absl::StatusOr<std::shared_ptr<Dataset>> MakeTokenDataset(std::vector<uint32_t> ids,
                                                          const TokenWindowOptions& options,
                                                          absl::string_view name) {
  return MakeFromStore(std::make_unique<VectorStore>(std::move(ids)), options, name);
}

namespace {

absl::StatusOr<std::shared_ptr<Dataset>> MakeTokenFile(const Kwargs& kwargs) {
  const TokenWindowOptions options = {.block_size = IntKwarg(kwargs, "block_size"),
                                      .vocab_size = IntKwarg(kwargs, "vocab_size"),
                                      .eos_id = IntKwarg(kwargs, "eos_id"),
                                      .pad_id = IntKwarg(kwargs, "pad_id")};
  const TokenDtype dtype =
      StringKwarg(kwargs, "dtype") == "uint32" ? TokenDtype::kUInt32 : TokenDtype::kUInt16;
  return OpenTokenFile(StringKwarg(kwargs, "path"), dtype, options);
}

absl::Status CheckTokenFileKwargs(const KwargsView& view) {
  return CheckOptions({.block_size = IntKwarg(view.kwargs, "block_size"),
                       .vocab_size = IntKwarg(view.kwargs, "vocab_size"),
                       .eos_id = IntKwarg(view.kwargs, "eos_id"),
                       .pad_id = IntKwarg(view.kwargs, "pad_id")});
}

KD_REGISTER(DatasetRegistry(), kKey, MakeTokenFile,
            {{.name = "path",
              .type = KwargType::kString,
              .doc = "the token file: ids back to back, no header (//tools:tokenize's train.bin)",
              .required = true},
             {.name = "dtype",
              .type = KwargType::kString,
              .doc = "width of each little-endian id",
              .default_value = "uint16",
              .choices = {"uint16", "uint32"}},
             {.name = "block_size",
              .type = KwargType::kInteger,
              .doc = "tokens per sample (the model's context)",
              .min = 2,
              .max = 1 << 24,
              .required = true},
             {.name = "vocab_size",
              .type = KwargType::kInteger,
              .doc = "the tokenizer's vocabulary size; every id must be below it",
              .min = 1,
              .max = 4294967296.0,
              .required = true},
             {.name = "eos_id",
              .type = KwargType::kInteger,
              .doc = "the id ending each document; windows stay within documents (-1: one "
                     "flat stream, windows back to back)",
              .default_value = -1,
              .min = -1},
             {.name = "pad_id",
              .type = KwargType::kInteger,
              .doc = "the id padding a document's last window (-1: eos_id)",
              .default_value = -1,
              .min = -1}},
            CheckTokenFileKwargs);

}  // namespace
}  // namespace kd
