// What a file given as a model, a state file, a checkpoint or an input is, read from its bytes
// before libtorch sees them: torch.jit.save and torch.save write zip archives, and libtorch's
// reader checks neither their CRC-32s nor, in its messages, what kind of file it was handed.
//
//   KD_ASSIGN_OR_RETURN(kd::TorchArchive archive, kd::InspectTorchArchive(bytes));
//   if (archive.kind != kd::TorchArchive::Kind::kTorchScript) ...   // say what it is instead
//   KD_RETURN_IF_ERROR(kd::VerifyTorchArchive(bytes));  // every record's CRC-32
//
// Torch-free (zlib and absl only): the checks cost no libtorch headers.
#ifndef LIBKD_BASE_TORCH_ARCHIVE_H_
#define LIBKD_BASE_TORCH_ARCHIVE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kd {

struct TorchArchive {
  enum class Kind {
    kTorchScript,  // torch.jit.save: code/ and constants.pkl beside data.pkl
    kTorchSave,    // torch.save (>= 1.6) or kd::WriteTorchFile: data.pkl and tensor records
    kOtherZip,     // a zip archive without data.pkl
  };
  struct Record {
    std::string name;          // "model/data/0"
    uint64_t data_offset = 0;  // of the record's bytes in the file
    uint64_t size = 0;         // stored (compressed) size
    uint64_t uncompressed_size = 0;
    uint32_t crc32 = 0;                   // as the central directory states it
    uint16_t method = 0;                  // 0 stored (what torch writes), 8 deflate
    uint64_t directory_entry_offset = 0;  // of its central-directory entry
    uint64_t local_header_offset = 0;
  };
  Kind kind = Kind::kOtherZip;
  std::string prefix;           // the folder every record is in ("model"), without the slash
  int64_t format_version = -1;  // the `version` record's number (-1: none)
  std::vector<Record> records;  // in central-directory order
};

// The CRC-32 of `data` (zlib's, as zip records carry it).
uint32_t Crc32(absl::string_view data);

// "a TorchScript archive (torch.jit.save)", "a torch.save archive", "a zip archive".
std::string DescribeKind(TorchArchive::Kind kind);

// InspectTorchArchive's first check on a file's first 14 bytes and its size, for readers that
// refuse a file that is no zip archive before reading it whole (a 3 GiB file of zeros given as
// a checkpoint was read into memory first).
absl::Status CheckTorchArchiveHead(absl::string_view head, uint64_t size);

// Reads the zip structure (end record, zip64 records, central directory, local headers)
// without checking the records' contents. InvalidArgument, in words for the user, for: a legacy
// (non-zip) torch.save file, a file that is not a zip archive, one cut short (its end record
// or directory missing), and a directory that points outside the file.
absl::StatusOr<TorchArchive> InspectTorchArchive(absl::string_view bytes);

// InspectTorchArchive, then every record's CRC-32 against the directory's (stored records
// directly, deflated ones inflated with zlib): DataLoss naming the first bad record.
absl::StatusOr<TorchArchive> VerifyTorchArchive(absl::string_view bytes);

// Walks the opcodes of a pickle (protocols 0-5) and checks that every length an opcode gives
// (strings, bytes, longs, frames) fits in what is left of it, before libtorch's unpickler
// allocates that length (a 4-byte BINUNICODE length of 4 GB in a small file made it allocate
// 4 GB; found by //fuzz:checkpoint_fuzzer). InvalidArgument naming the opcode and its offset;
// an unknown opcode or a pickle without STOP too.
absl::Status CheckPickleBounds(absl::string_view pickle);

}  // namespace kd

#endif  // LIBKD_BASE_TORCH_ARCHIVE_H_
