// The teacher cache's spill reader on arbitrary bytes: a cache that spilled five rows has its
// spill file's bytes replaced by the input (cut or padded to any length), then serves the same
// batch again. Whatever the bytes, it must return exactly the teacher's own values (rows that
// fail their CRC-32 are recomputed, and the cache turns itself off) or, when the cache is
// required, an error: any other value aborts. The input's first byte picks required or not.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include <ATen/ATen.h>

#include "distill/boxes/internal/teacher_cache.h"
#include "distill/data/dataset.h"

namespace {

using kd::Batch;
using kd::boxes_internal::TeacherCache;
using kd::boxes_internal::TeacherValues;

Batch MakeBatch() {
  const at::Tensor index = at::arange(8, at::kLong);
  const at::Tensor transform = index % 2;
  c10::Dict<std::string, at::Tensor> supp;
  supp.insert("indices", index);
  supp.insert(kd::kTransformKey, transform);
  const at::Tensor base = (index * 10 + transform).to(at::kFloat).unsqueeze(1);
  return Batch{at::sin(base * at::arange(1, 7, at::kFloat) * 0.37), index % 3, supp};
}

absl::StatusOr<TeacherValues> Teacher(const Batch& batch) {
  const at::Tensor x = batch.samples.toTensor();
  TeacherValues values;
  values.output = at::tanh(x.sum(1, /*keepdim=*/true) * 0.5);  // 4 bytes a row
  values.io["feat"]["output"] = x * 2 + 1;                      // 24 bytes a row
  return values;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = [] {
    const char* dir = std::getenv("TEST_TMPDIR");
    return std::string(dir != nullptr ? dir : "/tmp") + "/teacher_cache_spill_fuzzer." +
           std::to_string(::getpid()) + ".bin";
  }();
  const bool required = size > 0 && (data[0] & 1) != 0;
  TeacherCache cache({.num_transforms = 2,
                      .memory_bytes = 3 * 28,  // three rows in memory, five on disk
                      .spill_path = path,
                      .required = required});
  const Batch batch = MakeBatch();
  if (!cache.Run(batch, Teacher).ok()) std::abort();
  {
    std::ofstream out(path, std::ios::binary | std::ios::in | std::ios::out);
    if (size > 1) out.write(reinterpret_cast<const char*>(data) + 1,
                            static_cast<std::streamsize>(size - 1));
  }
  if (size > 1 && (data[1] & 1) != 0) (void)::truncate(path.c_str(), (size - 1) % 200);
  absl::StatusOr<TeacherValues> got = cache.Run(batch, Teacher);
  if (!got.ok()) {
    if (!required) std::abort();  // AUTO recomputes; only a required cache may refuse
    return 0;
  }
  const TeacherValues want = *Teacher(batch);
  if (!at::equal(got->output.toTensor(), want.output.toTensor()) ||
      !at::equal(got->io.at("feat").at("output").toTensor(),
                 want.io.at("feat").at("output").toTensor())) {
    std::abort();  // a silently different teacher value
  }
  return 0;
}
