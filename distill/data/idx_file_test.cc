#include "distill/data/idx_file.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using Bytes = std::vector<uint8_t>;

// An IDX file's bytes: magic 0 0 type ndim, big-endian dims, then `data`.
Bytes Idx(uint8_t type, const std::vector<uint32_t>& dims, const Bytes& data) {
  Bytes out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    out.insert(out.end(), {static_cast<uint8_t>(d >> 24), static_cast<uint8_t>(d >> 16),
                           static_cast<uint8_t>(d >> 8), static_cast<uint8_t>(d)});
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

Bytes Iota(int n) {
  Bytes out(n);
  for (int i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(i);
  return out;
}

std::string TempPath(const std::string& name) { return ::testing::TempDir() + "/" + name; }

// Writes `bytes` gzip-compressed to `name` in the test's temporary folder; returns the path.
std::string WriteGzip(const std::string& name, const Bytes& bytes) {
  const std::string path = TempPath(name);
  gzFile file = gzopen(path.c_str(), "wb");
  EXPECT_NE(file, nullptr) << path;
  EXPECT_EQ(gzwrite(file, bytes.data(), bytes.size()), static_cast<int>(bytes.size()));
  EXPECT_EQ(gzclose(file), Z_OK);
  return path;
}

std::string WritePlain(const std::string& name, const Bytes& bytes) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return path;
}

Bytes ReadRaw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(ReadIdxFileTest, ReadsGzipImages) {
  const std::string path = WriteGzip("images.gz", Idx(0x08, {2, 3, 4}, Iota(24)));
  absl::StatusOr<at::Tensor> images = ReadIdxFile(path);
  ASSERT_THAT(images, IsOk());
  EXPECT_EQ(images->scalar_type(), at::kByte);
  EXPECT_EQ(images->sizes(), at::IntArrayRef({2, 3, 4}));
  EXPECT_TRUE(images->equal(at::arange(24, at::kByte).view({2, 3, 4})));
}

TEST(ReadIdxFileTest, ReadsPlainLabels) {
  const std::string path = WritePlain("labels", Idx(0x08, {5}, {9, 0, 0, 3, 255}));
  absl::StatusOr<at::Tensor> labels = ReadIdxFile(path);
  ASSERT_THAT(labels, IsOk());
  EXPECT_TRUE(labels->equal(at::tensor({9, 0, 0, 3, 255}, at::kByte)));
}

TEST(ReadIdxFileTest, MissingFileIsNotFound) {
  const std::string path = TempPath("no-such-file.gz");
  EXPECT_THAT(ReadIdxFile(path), StatusIs(absl::StatusCode::kNotFound,
                                          AllOf(HasSubstr(path), HasSubstr("no such file"))));
}

TEST(ReadIdxFileTest, BadMagicNamesFileAndMagic) {
  const std::string path = WriteGzip("bad_magic.gz", {0x1f, 0x8b, 0x08, 0x01, 0, 0, 0, 1, 7});
  EXPECT_THAT(ReadIdxFile(path), StatusIs(absl::StatusCode::kDataLoss,
                                          AllOf(HasSubstr(path), HasSubstr("not an IDX file"),
                                                HasSubstr("magic number 0x1f8b0801"))));
}

TEST(ReadIdxFileTest, UnsupportedTypeIsNamed) {
  const std::string path = WriteGzip("floats.gz", Idx(0x0D, {1}, {0, 0, 0, 0}));
  EXPECT_THAT(ReadIdxFile(path),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(path), HasSubstr("type 0x0d (float) is not supported"))));
}

TEST(ReadIdxFileTest, ZeroDimensionsIsCorrupt) {
  const std::string path = WriteGzip("zero_dims.gz", {0, 0, 8, 0});
  EXPECT_THAT(ReadIdxFile(path), StatusIs(absl::StatusCode::kDataLoss,
                                          AllOf(HasSubstr(path), HasSubstr("0 dimensions"))));
}

TEST(ReadIdxFileTest, TruncatedHeader) {
  const std::string path = WriteGzip("short_header.gz", {0, 0, 8, 3, 0, 0, 0, 2});
  EXPECT_THAT(ReadIdxFile(path), StatusIs(absl::StatusCode::kDataLoss,
                                          AllOf(HasSubstr(path), HasSubstr("truncated"),
                                                HasSubstr("needs 16 bytes"), HasSubstr("has 8"))));
}

// A hostile input: a 16-byte file whose header claims 65535 x 65535 x 255 elements (2^40 is
// the cap) made the reader allocate a terabyte before reading.
TEST(ReadIdxFileTest, AHugeHeaderOnASmallFileIsTruncatedNotAnAllocation) {
  const std::string path = WritePlain("huge_header.idx", Idx(0x08, {65535, 65535, 255}, Iota(3)));
  EXPECT_THAT(ReadIdxFile(path),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("truncated: the header gives dimensions 65535x65535x255"),
                             HasSubstr("the file has 3"))));
}

// A gzip file holds far more than its size (zeros compress ~1000:1): a small file may claim
// gigabytes, all of them there. The reader allocates the data once, after its first 16 MiB
// were read, and a claim the process cannot allocate is refused by name (it ended in bad_alloc,
// exit 134, when the data went into a growing buffer). A child process under an address-space
// limit 1 GiB above what it maps now reads a 20 MiB file claiming 2 GiB.
TEST(ReadIdxFileTest, AClaimBeyondWhatCanBeAllocatedIsRefused) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan reserves terabytes of address space: an address-space limit cannot hold";
#endif
  Bytes zeros(20 << 20, 0);
  const std::string path = WriteGzip("claims_2gib.gz", Idx(0x08, {2048, 1024, 1024}, zeros));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::ifstream statm("/proc/self/statm");
    long pages = 0;
    statm >> pages;
    const rlim_t limit = static_cast<rlim_t>(pages) * ::sysconf(_SC_PAGESIZE) + (rlim_t{1} << 30);
    const rlimit rl{limit, limit};
    if (::setrlimit(RLIMIT_AS, &rl) != 0) std::_Exit(3);
    absl::StatusOr<at::Tensor> read = ReadIdxFile(path);
    const bool named =
        read.status().code() == absl::StatusCode::kResourceExhausted &&
        read.status().message() ==
            path +
                ": the header gives dimensions 2048x1024x1024 (2.0 GiB of data), more memory "
                "than this process can allocate";
    std::_Exit(named ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died: signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // Without the limit the same file is a truncated one, read to its end.
  EXPECT_THAT(ReadIdxFile(path),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("(2147483648 bytes of data), the file has 20971520")));
}

// Found by //fuzz:idx_fuzzer (its corpus keeps the input): dimensions whose product overflows
// int64 passed the 2^40 check and reached at::empty, which threw through the reader.
TEST(ReadIdxFileTest, DimensionsWhoseProductOverflowsAreRefused) {
  const std::string path =
      WritePlain("overflow.idx", Idx(0x08, {0xc700ffffu, 0xffffffffu, 0xffffffffu}, Iota(3)));
  EXPECT_THAT(ReadIdxFile(path),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("the IDX header gives dimensions 3338731519x4294967295..., "
                                 "more than 2^40 elements")));
}

// Found by //fuzz:idx_fuzzer: no elements (a dimension of 0), but the other dimensions'
// strides overflow, which at::empty threw through the reader.
TEST(ReadIdxFileTest, DimensionsLibtorchCannotStride) {
  const std::string path = WritePlain("strides.idx", Idx(0x08, {0, 0xffffffffu, 0xffdb003bu}, {}));
  EXPECT_THAT(ReadIdxFile(path),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("the header's dimensions 0x4294967295x4292542523 make no "
                                 "tensor: Stride calculation overflowed")));
}

TEST(ReadIdxFileTest, OnlyRegularFiles) {
  EXPECT_THAT(ReadIdxFile("/dev/zero"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "/dev/zero: is a character device; libkd reads only regular files: give "
                       "the path of the file itself"));
  const std::string fifo = TempPath("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(ReadIdxFile(fifo),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is a FIFO (named pipe)")));
}

TEST(ReadIdxFileTest, TruncatedData) {
  // The header promises 2 x 3 x 4 = 24 bytes; 20 follow.
  const std::string path = WriteGzip("short_data.gz", Idx(0x08, {2, 3, 4}, Iota(20)));
  EXPECT_THAT(ReadIdxFile(path),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(path), HasSubstr("truncated"), HasSubstr("2x3x4"),
                             HasSubstr("24 bytes of data"), HasSubstr("the file has 20"))));
}

TEST(ReadIdxFileTest, ExtraDataIsCorrupt) {
  const std::string path = WriteGzip("long_data.gz", Idx(0x08, {3}, Iota(4)));
  EXPECT_THAT(ReadIdxFile(path),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(path), HasSubstr("more data than"), HasSubstr("3 bytes"))));
}

TEST(ReadIdxFileTest, TruncatedGzipStream) {
  // A whole IDX file compressed, then the gzip file cut in the middle of its deflate data.
  const std::string whole = WriteGzip("whole.gz", Idx(0x08, {100, 28, 28}, Iota(78400)));
  Bytes gz = ReadRaw(whole);
  ASSERT_GT(gz.size(), 100u);
  gz.resize(gz.size() / 2);
  const std::string path = WritePlain("cut.gz", gz);
  EXPECT_THAT(ReadIdxFile(path),
              StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr(path), HasSubstr("gzip"))));
}

TEST(ReadIdxFileTest, CorruptGzipStream) {
  const std::string whole = WriteGzip("whole2.gz", Idx(0x08, {100, 28, 28}, Iota(78400)));
  Bytes gz = ReadRaw(whole);
  ASSERT_GT(gz.size(), 100u);
  for (size_t i = gz.size() / 3; i < gz.size() / 3 + 16; ++i) gz[i] ^= 0x5a;
  const std::string path = WritePlain("corrupt.gz", gz);
  EXPECT_THAT(ReadIdxFile(path), StatusIs(absl::StatusCode::kDataLoss, HasSubstr(path)));
}

}  // namespace
}  // namespace kd
