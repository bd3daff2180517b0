#include "base/torch_file.h"

#include <vector>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "base/torch_status.h"

namespace kd {

absl::StatusOr<std::string> EncodeTorchSave(const c10::IValue& value) {
  return CallTorch([&] {
    std::string pickled;
    // As torch::pickle_save, but with tag_aggregates = false (see the header).
    torch::jit::Pickler pickler(
        [&](const char* bytes, size_t size) { pickled.append(bytes, size); },
        /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
        /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
    pickler.protocol();
    pickler.pushIValue(value);
    pickler.stop();
    std::string archive;
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, size_t size) {
      archive.append(static_cast<const char*>(bytes), size);
      return size;
    });
    torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(),
                                       pickler.tensorData(), writer);
    writer.writeEndOfFile();
    return archive;
  });
}

absl::Status WriteTorchFile(const std::string& path, const c10::IValue& value) {
  KD_ASSIGN_OR_RETURN(std::string bytes, EncodeTorchSave(value));
  return WriteFileAtomically(path, bytes);
}

absl::StatusOr<c10::IValue> DecodeTorchSave(const std::string& bytes) {
  return CallTorch(
      [&] { return torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end())); },
      absl::StatusCode::kInvalidArgument);
}

absl::StatusOr<c10::IValue> ReadTorchFile(const std::string& path) {
  KD_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  absl::StatusOr<c10::IValue> value = DecodeTorchSave(bytes);
  if (!value.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not readable as a torch.save file: ", value.status().message()));
  }
  return value;
}

}  // namespace kd
