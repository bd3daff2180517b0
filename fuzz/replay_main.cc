// The main of the fuzz targets outside --config=fuzz: runs LLVMFuzzerTestOneInput on every file
// of the folders (or files) given, so that each target's corpus, the crashes fuzzing found
// included, is a regression test in `bazel test //...` with gcc and no libFuzzer.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

// libFuzzer's -malloc_limit_mb, for the replay: one allocation of more than 2 GiB is what a
// small input must never cause (libtorch's unpickler once grew a table to 22 GB); without this a
// gcc build would see it only as a bad_alloc that the readers turn into an error, or not at all.
namespace {
constexpr size_t kMaxAllocation = size_t{2} << 30;
void* Allocate(size_t size) {
  if (size > kMaxAllocation) {
    std::fprintf(stderr, "replay: an allocation of %zu bytes (more than 2 GiB) from one input\n",
                 size);
    std::abort();
  }
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(size_t size) { return Allocate(size); }
void* operator new[](size_t size) { return Allocate(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

int main(int argc, char** argv) {
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
    } else {
      files.push_back(arg);
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "replay: no inputs (give corpus folders or files)\n");
    return 2;
  }
  for (const std::filesystem::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replay: %zu inputs ran clean\n", files.size());
  return 0;
}
