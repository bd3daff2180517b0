#include "distill/boxes/internal/teacher_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "base/torch_archive.h"
#include "distill/boxes/internal/batch_rows.h"
#include "distill/data/dataset.h"

namespace kd {
namespace boxes_internal {
TeacherCache::TeacherCache(Options options) : options_(std::move(options)) {}

TeacherCache::~TeacherCache() { RemoveSpill(); }

absl::Status TeacherCache::Layout(const TeacherValues& values, int64_t rows) {
  std::vector<Field> fields;
  auto add = [&](std::string path, std::string io, const c10::IValue& value,
                 std::string key = "") -> absl::Status {
    const std::string name =
        !path.empty() || !io.empty() ? absl::StrCat("io[\"", path, "\"][\"", io, "\"]")
        : key.empty()                ? std::string("output")
                                     : absl::StrCat("output[\"", key, "\"]");
    if (!value.isTensor() || value.toTensor().dim() == 0 || value.toTensor().size(0) != rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          "teacher_cache: the teacher's ", name, " is ",
          value.isTensor() ? absl::StrCat("a tensor of shape [",
                                          absl::StrJoin(value.toTensor().sizes(), ", "), "]")
                           : absl::StrCat("a ", value.tagKind()),
          ", not a tensor of the batch's ", rows,
          " rows: the cache keeps each sample's rows; set the stage's teacher_cache { mode: OFF "
          "}"));
    }
    const at::Tensor& t = value.toTensor();
    Field field{.path = std::move(path),
                .io = std::move(io),
                .key = std::move(key),
                .dtype = t.scalar_type()};
    field.row_shape.assign(t.sizes().begin() + 1, t.sizes().end());
    field.row_bytes = static_cast<int64_t>(t.numel() / rows * t.element_size());
    fields.push_back(std::move(field));
    return absl::OkStatus();
  };
  if (values.output.isGenericDict()) {  // Hugging Face's {"logits": ..., ...}: entry by entry
    for (const auto& entry : values.output.toGenericDict()) {
      if (!entry.key().isString()) {
        return absl::InvalidArgumentError(
            "teacher_cache: the teacher's output is a dict with keys that are not strings; set "
            "the stage's teacher_cache { mode: OFF }");
      }
      KD_RETURN_IF_ERROR(add("", "", entry.value(), entry.key().toStringRef()));
    }
  } else {
    KD_RETURN_IF_ERROR(add("", "", values.output));
  }
  for (const auto& [path, entry] : values.io) {
    for (const auto& [io, value] : entry) {
      KD_RETURN_IF_ERROR(add(path, std::string(io), value));
    }
  }
  int64_t offset = 0;
  for (Field& field : fields) {
    field.offset = offset;
    offset += field.row_bytes;
  }
  fields_ = std::move(fields);
  row_bytes_ = std::max<int64_t>(offset, 1);
  memory_rows_ = options_.memory_bytes / row_bytes_;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<at::Tensor>> TeacherCache::Flatten(const TeacherValues& values,
                                                              int64_t rows) const {
  std::vector<at::Tensor> out;
  out.reserve(fields_.size());
  for (const Field& field : fields_) {
    c10::IValue value;
    if (field.path.empty() && field.io.empty() && !field.key.empty()) {
      if (values.output.isGenericDict()) {
        const c10::impl::GenericDict dict = values.output.toGenericDict();
        if (const auto it = dict.find(field.key); it != dict.end()) value = it->value();
      }
    } else if (field.path.empty() && field.io.empty()) {
      value = values.output;
    } else if (const auto it = values.io.find(field.path);
               it != values.io.end() && it->second.count(field.io) > 0) {
      value = it->second.at(field.io);
    }
    std::vector<int64_t> shape = {rows};
    shape.insert(shape.end(), field.row_shape.begin(), field.row_shape.end());
    if (!value.isTensor() || value.toTensor().sizes() != at::IntArrayRef(shape) ||
        value.toTensor().scalar_type() != field.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "teacher_cache: the teacher's ",
          field.path.empty() && field.io.empty()
              ? std::string("output")
              : absl::StrCat("io[\"", field.path, "\"][\"", field.io, "\"]"),
          " changed its shape or dtype from one batch to the next; the cache keeps rows of one "
          "shape; set the stage's teacher_cache { mode: OFF }"));
    }
    out.push_back(value.toTensor().to(at::kCPU).contiguous());
  }
  return out;
}

TeacherValues TeacherCache::Unflatten(std::vector<at::Tensor> fields) const {
  TeacherValues values;
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  for (size_t i = 0; i < fields_.size(); ++i) {
    const Field& field = fields_[i];
    if (field.path.empty() && field.io.empty() && !field.key.empty()) {
      dict.insert(field.key, std::move(fields[i]));
    } else if (field.path.empty() && field.io.empty()) {
      values.output = std::move(fields[i]);
    } else {
      values.io[field.path][field.io] = std::move(fields[i]);
    }
  }
  if (!dict.empty()) values.output = dict;  // a dict output, entry by entry
  return values;
}

void TeacherCache::Store(int64_t key, const std::vector<at::Tensor>& fields, int64_t row) {
  if (slots_.count(key) > 0 || !enabled()) return;
  const int64_t slot = static_cast<int64_t>(slots_.size());
  std::vector<char> spill;
  char* dst = nullptr;
  if (slot < memory_rows_) {
    const size_t need = static_cast<size_t>((slot + 1) * row_bytes_);
    if (memory_.size() < need) {
      memory_.resize(std::min<size_t>(std::max(need, 2 * memory_.size()),
                                      static_cast<size_t>(memory_rows_ * row_bytes_)));
    }
    dst = memory_.data() + slot * row_bytes_;
  } else {
    spill.resize(static_cast<size_t>(row_bytes_));
    dst = spill.data();
  }
  for (size_t i = 0; i < fields_.size(); ++i) {
    const char* src = static_cast<const char*>(fields[i].data_ptr()) + row * fields_[i].row_bytes;
    std::memcpy(dst + fields_[i].offset, src, static_cast<size_t>(fields_[i].row_bytes));
  }
  if (slot >= memory_rows_) {
    if (spill_fd_ < 0) {
      if (absl::Status opened = OpenSpill(); !opened.ok()) {
        Disable(std::string(opened.message()));
        return;
      }
    }
    const int64_t disk_slot = slot - memory_rows_;
    if ((disk_slot + 1) * row_bytes_ > spill_budget_) {
      Disable(absl::StrCat("the spill file ", options_.spill_path, " reached its budget of ",
                           HumanBytes(spill_budget_),
                           " (teacher_cache.disk_mib, at most half the disk's free space)"));
      return;
    }
    const off_t at = static_cast<off_t>(disk_slot) * row_bytes_;
    if (pwrite(spill_fd_, spill.data(), spill.size(), at) != static_cast<ssize_t>(spill.size())) {
      Disable(absl::StrCat("cannot write the spill file ", options_.spill_path, ": ",
                           std::strerror(errno)));
      return;
    }
    spill_crc_.push_back(Crc32(absl::string_view(spill.data(), spill.size())));
    stats_.bytes_disk += row_bytes_;
  } else {
    stats_.bytes_memory += row_bytes_;
  }
  slots_.emplace(key, slot);
}

absl::StatusOr<TeacherValues> TeacherCache::Timed(const Forward& forward, const Batch& batch,
                                                  int64_t rows) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<TeacherValues> values = forward(batch);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats_.teacher_seconds += seconds;
  stats_.misses += rows;
  total_rows_ += rows;
  total_seconds_ += seconds;
  return values;
}

absl::Status TeacherCache::Refuse(const absl::Status& why) {
  if (options_.required) return why;
  Disable(std::string(why.message()));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> TeacherCache::Keys(const Batch& batch, int64_t rows) const {
  KD_ASSIGN_OR_RETURN(std::vector<int64_t> keys, SuppValues(batch, "indices", rows));
  if (options_.num_transforms > 1) {
    KD_ASSIGN_OR_RETURN(std::vector<int64_t> transforms, SuppValues(batch, kTransformKey, rows));
    for (int64_t r = 0; r < rows; ++r) keys[r] = keys[r] * options_.num_transforms + transforms[r];
  }
  return keys;
}

absl::StatusOr<bool> TeacherCache::Matches(const std::vector<at::Tensor>& fresh, int64_t first,
                                           const std::vector<int64_t>& slots, int64_t rows) {
  std::vector<char> cached(static_cast<size_t>(row_bytes_));
  for (int64_t j = first; j < static_cast<int64_t>(slots.size()) + first; ++j) {
    if (absl::Status loaded = Load(slots[j - first], cached.data()); !loaded.ok()) {
      if (options_.required) return loaded;
      return false;  // the cache is off: the batch is recomputed whole
    }
    for (size_t i = 0; i < fields_.size(); ++i) {
      const char* now = static_cast<const char*>(fresh[i].data_ptr()) + j * fields_[i].row_bytes;
      if (std::memcmp(now, cached.data() + fields_[i].offset,
                      static_cast<size_t>(fields_[i].row_bytes)) != 0) {
        Disable(absl::StrFormat(
            "the teacher computed a sample differently in a batch of %d rows than when it was "
            "cached (%s): its kernels depend on the batch, so the cache cannot be exact",
            rows, fields_[i].path.empty() ? "its output" : fields_[i].path));
        if (options_.required) {
          return absl::FailedPreconditionError(
              absl::StrCat("teacher_cache: ", disabled_reason_,
                           "; set the stage's teacher_cache { mode: OFF }"));
        }
        return false;
      }
    }
  }
  return true;
}

absl::Status TeacherCache::StillRequired() const {
  if (!options_.required || enabled()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "teacher_cache: mode ON, but the cache had to turn off: ", disabled_reason_,
      "; set the stage's teacher_cache { mode: AUTO } to run on without it"));
}

absl::StatusOr<TeacherValues> TeacherCache::Run(const Batch& batch, const Forward& forward) {
  KD_RETURN_IF_ERROR(StillRequired());
  const int64_t rows = BatchRows(batch);
  if (!enabled() || rows < 2) return Timed(forward, batch, rows);  // a batch of one as it is

  // A batch without the keys (one a caller of the step API built) runs as it is, unless the
  // cache is required.
  absl::StatusOr<std::vector<int64_t>> keys = Keys(batch, rows);
  if (!keys.ok()) {
    if (options_.required) return keys.status();
    return Timed(forward, batch, rows);
  }
  std::vector<int64_t> hit_slots(rows, -1), misses, hits;
  for (int64_t r = 0; r < rows; ++r) {
    const auto it = slots_.find((*keys)[r]);
    if (it == slots_.end()) {
      misses.push_back(r);
    } else {
      hit_slots[r] = it->second;
      hits.push_back(r);
    }
  }

  if (hits.empty()) {  // the whole batch, as without the cache; its rows stored
    KD_ASSIGN_OR_RETURN(TeacherValues values, Timed(forward, batch, rows));
    if (fields_.empty()) {
      if (absl::Status laid = Layout(values, rows); !laid.ok()) {
        KD_RETURN_IF_ERROR(Refuse(laid));
        return values;
      }
    }
    absl::StatusOr<std::vector<at::Tensor>> fields = Flatten(values, rows);
    if (!fields.ok()) {
      KD_RETURN_IF_ERROR(Refuse(fields.status()));
      return values;
    }
    for (int64_t r = 0; r < rows; ++r) Store((*keys)[r], *fields, r);
    KD_RETURN_IF_ERROR(StillRequired());  // a spill that failed
    return values;
  }

  // The misses, with up to kCheckRows hits recomputed beside them (and at least two rows).
  std::vector<int64_t> run_rows = misses, check_slots;
  const size_t checks = std::min<size_t>(hits.size(), misses.empty() ? 0 : kCheckRows);
  for (size_t i = 0; i < checks; ++i) {
    run_rows.push_back(hits[i * hits.size() / checks]);
    check_slots.push_back(hit_slots[run_rows.back()]);
  }
  int64_t unserved = 0;  // rows Prefill computed for this batch: not hits
  for (int64_t r : hits) {
    if (std::find(run_rows.begin() + static_cast<int64_t>(misses.size()), run_rows.end(), r) ==
        run_rows.end()) {
      unserved += static_cast<int64_t>(unserved_.erase((*keys)[r]));
    }
  }
  std::vector<at::Tensor> fresh;
  if (!run_rows.empty()) {
    const auto n = static_cast<int64_t>(run_rows.size());
    KD_ASSIGN_OR_RETURN(TeacherValues values,
                        Timed(forward, SelectRows(batch, at::tensor(run_rows, at::kLong)), n));
    absl::StatusOr<std::vector<at::Tensor>> flat = Flatten(values, n);
    if (!flat.ok()) {
      KD_RETURN_IF_ERROR(Refuse(flat.status()));
      return Timed(forward, batch, rows);  // this batch whole, as without the cache
    }
    fresh = *std::move(flat);
    KD_ASSIGN_OR_RETURN(const bool same,
                        Matches(fresh, static_cast<int64_t>(misses.size()), check_slots, n));
    if (!same) return Timed(forward, batch, rows);
    for (size_t j = 0; j < misses.size(); ++j) Store((*keys)[misses[j]], fresh, j);
    KD_RETURN_IF_ERROR(StillRequired());
  }

  // The batch's values: hits from the cache, misses from the fresh rows.
  std::vector<at::Tensor> out;
  for (const Field& field : fields_) {
    std::vector<int64_t> shape = {rows};
    shape.insert(shape.end(), field.row_shape.begin(), field.row_shape.end());
    out.push_back(at::empty(shape, at::TensorOptions().dtype(field.dtype)));
  }
  std::vector<char> cached(static_cast<size_t>(row_bytes_));
  for (int64_t r : hits) {
    if (absl::Status loaded = Load(hit_slots[r], cached.data()); !loaded.ok()) {
      if (options_.required) return loaded;
      return Timed(forward, batch, rows);  // the cache is off: this batch whole, as without it
    }
    for (size_t i = 0; i < fields_.size(); ++i) {
      std::memcpy(static_cast<char*>(out[i].data_ptr()) + r * fields_[i].row_bytes,
                  cached.data() + fields_[i].offset, static_cast<size_t>(fields_[i].row_bytes));
    }
  }
  for (size_t j = 0; j < misses.size(); ++j) {
    for (size_t i = 0; i < fields_.size(); ++i) {
      std::memcpy(static_cast<char*>(out[i].data_ptr()) + misses[j] * fields_[i].row_bytes,
                  static_cast<const char*>(fresh[i].data_ptr()) + j * fields_[i].row_bytes,
                  static_cast<size_t>(fields_[i].row_bytes));
    }
  }
  stats_.hits += static_cast<int64_t>(hits.size()) - static_cast<int64_t>(checks) - unserved;
  const c10::Device device = batch.samples.toTensor().device();
  if (!device.is_cpu()) {
    for (at::Tensor& t : out) t = t.to(device);
  }
  return Unflatten(std::move(out));
}

TeacherCacheReport TeacherCache::TakeStats() {
  TeacherCacheReport out = stats_;
  out.on = enabled();
  out.off_reason = disabled_reason_;
  out.lookahead_off_reason = lookahead_off_reason_;
  out.saved_seconds =
      total_rows_ > 0 ? static_cast<double>(out.hits) * total_seconds_ / total_rows_ : 0.0;
  stats_.hits = stats_.misses = 0;
  stats_.teacher_seconds = 0;
  return out;
}

}  // namespace boxes_internal
}  // namespace kd
