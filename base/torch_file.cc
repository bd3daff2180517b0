#include "base/torch_file.h"

#include <filesystem>
#include <fstream>
#include <system_error>
#include <vector>

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/versions.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/python_pickle.h"
#include "base/status_macros.h"
#include "base/torch_archive.h"
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
    torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(),
                                       writer);
    writer.writeEndOfFile();
    return archive;
  });
}

absl::Status WriteTorchFile(const std::string& path, const c10::IValue& value) {
  KD_ASSIGN_OR_RETURN(std::string bytes, EncodeTorchSave(value));
  return WriteFileAtomically(path, bytes);
}

absl::StatusOr<TorchArchive> CheckTorchArchive(absl::string_view bytes,
                                               TorchArchive::Kind expected) {
  KD_ASSIGN_OR_RETURN(TorchArchive archive, VerifyTorchArchive(bytes));
  const bool script = expected == TorchArchive::Kind::kTorchScript;
  if (archive.kind == TorchArchive::Kind::kTorchScript && !script) {
    return absl::InvalidArgumentError(
        "is a TorchScript archive (torch.jit.save), not a torch.save file: give it where a "
        "model is expected, or save the value with torch.save");
  }
  if (archive.kind == TorchArchive::Kind::kTorchSave && script) {
    return absl::InvalidArgumentError(
        "is a torch.save archive, not a TorchScript module: export the model with "
        "torch.jit.script(model).save(path) (or torch.jit.trace), or give a state file as "
        "src_ckpt of a native model");
  }
  if (archive.kind == TorchArchive::Kind::kOtherZip) {
    return absl::InvalidArgumentError(absl::StrCat("is a zip archive without data.pkl, so ",
                                                   script ? "torch.jit.save" : "torch.save",
                                                   " did not write it"));
  }
  if (archive.format_version >
      static_cast<int64_t>(caffe2::serialize::kMaxSupportedFileFormatVersion)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "was written by a newer PyTorch (file format version ", archive.format_version,
        "; this libtorch reads up to ", caffe2::serialize::kMaxSupportedFileFormatVersion,
        "): ", script ? "export" : "save", " it with the torch of libkd's environment"));
  }
  return archive;
}

absl::Status CheckTorchSaveArchive(absl::string_view bytes) {
  KD_ASSIGN_OR_RETURN(TorchArchive archive,
                      CheckTorchArchive(bytes, TorchArchive::Kind::kTorchSave));
  for (const TorchArchive::Record& record : archive.records) {
    if (record.name != archive.prefix + "/data.pkl") continue;
    // The pickle's first object a collections.OrderedDict (after the PROTO opcode, a GLOBAL
    // naming it): libtorch's unpickler reads it as None and fails later with an internal
    // assertion. (Every tensor's pickle names OrderedDict too, for its backward hooks: only the
    // first object is the value itself.)
    KD_RETURN_IF_ERROR(CheckPickleBounds(bytes.substr(record.data_offset, record.size)));
  }
  return absl::OkStatus();
}

namespace {

// Whether the pickle's first object is a collections.OrderedDict (after the PROTO opcode, a
// GLOBAL naming it): libtorch's unpickler reads it as None. (Every tensor's pickle names
// OrderedDict too, for its backward hooks: only the first object is the value itself.)
bool StartsWithOrderedDict(absl::string_view bytes, const TorchArchive& archive) {
  for (const TorchArchive::Record& record : archive.records) {
    if (record.name != archive.prefix + "/data.pkl") continue;
    const absl::string_view pickle = bytes.substr(record.data_offset, record.size);
    return pickle.size() > 2 && pickle[0] == '\x80' &&
           absl::StartsWith(pickle.substr(2), "ccollections\nOrderedDict\n");
  }
  return false;
}

}  // namespace

absl::StatusOr<c10::IValue> DecodeTorchSave(const std::string& bytes) {
  KD_RETURN_IF_ERROR(CheckTorchSaveArchive(bytes));
  KD_ASSIGN_OR_RETURN(TorchArchive archive, InspectTorchArchive(bytes));
  // Python's OrderedDicts (every state_dict()) and objects of other classes (torchdistill's
  // checkpoints hold an argparse.Namespace) libtorch's unpickler cannot read: libkd's reader of
  // Python's pickles reads those files (base/python_pickle.h).
  if (StartsWithOrderedDict(bytes, archive)) return UnpicklePythonTorchSave(bytes, archive);
  absl::StatusOr<c10::IValue> value = CallTorch(
      [&] { return torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end())); },
      absl::StatusCode::kInvalidArgument);
  if (!value.ok()) {
    absl::StatusOr<c10::IValue> python = UnpicklePythonTorchSave(bytes, archive);
    if (python.ok()) return python;
    return absl::InvalidArgumentError(
        absl::StrCat("libtorch cannot unpickle it: ", value.status().message()));
  }
  return value;
}

absl::StatusOr<c10::IValue> ReadTorchFile(const std::string& path) {
  // What is no zip archive is refused from its first bytes, before the whole file is read.
  KD_RETURN_IF_ERROR(CheckRegularFile(path));
  {
    std::ifstream file(path, std::ios::binary);
    char head[14] = {};
    file.read(head, sizeof(head));
    std::error_code error;
    const uint64_t size = std::filesystem::file_size(path, error);
    if (absl::Status checked =
            CheckTorchArchiveHead(absl::string_view(head, static_cast<size_t>(file.gcount())),
                                  error ? 0 : size);
        !checked.ok()) {
      return WithContext(path, checked);
    }
  }
  KD_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  absl::StatusOr<c10::IValue> value = DecodeTorchSave(bytes);
  if (!value.ok()) {
    return WithContext(path, value.status());
  }
  return value;
}

}  // namespace kd
