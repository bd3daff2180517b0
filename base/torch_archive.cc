#include "base/torch_archive.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "base/internal/le_reader.h"

namespace kd {
namespace {

using base_internal::Reader;

constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint32_t kCentralSignature = 0x02014b50;
constexpr uint32_t kLocalSignature = 0x04034b50;
constexpr size_t kEndSize = 22;
constexpr size_t kZip64LocatorSize = 20;
constexpr size_t kZip64EndSize = 56;
constexpr size_t kCentralSize = 46;
constexpr size_t kLocalSize = 30;

// Python's pickle of torch.save's legacy magic number: protocol 2, LONG1 of 10 bytes,
// 0x1950a86a20f9469cfc6c little-endian.
constexpr absl::string_view kLegacyTorchSave(
    "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 14);

absl::Status Invalid(absl::string_view message) { return absl::InvalidArgumentError(message); }

absl::Status CutShort(uint64_t size, absl::string_view what) {
  return Invalid(absl::StrCat("a zip archive cut short (", size, " bytes; ", what,
                              "): the copy is incomplete, copy or save the file again"));
}

// The 8-byte values of a zip64 extra field (id 1) for the fields that are 0xFFFFFFFF, in order.
void ApplyZip64Extra(const Reader& r, uint64_t extra, uint64_t extra_len,
                     std::vector<uint64_t*> wanted) {
  uint64_t p = extra;
  while (p + 4 <= extra + extra_len && r.Has(p, 4)) {
    const uint16_t id = r.U16(p);
    const uint16_t len = r.U16(p + 2);
    if (id == 1) {
      uint64_t q = p + 4;
      for (uint64_t* field : wanted) {
        if (q + 8 > p + 4 + len || !r.Has(q, 8)) return;
        *field = r.U64(q);
        q += 8;
      }
      return;
    }
    p += 4 + len;
  }
}

// Where the central directory is, and how many entries it has.
absl::Status FindDirectory(const Reader& r, uint64_t* offset, uint64_t* size, uint64_t* count) {
  if (r.size() < kEndSize) return CutShort(r.size(), "no end record");
  // The end record is last, followed by a comment of at most 65535 bytes.
  const uint64_t lowest = r.size() > kEndSize + 0xffff ? r.size() - kEndSize - 0xffff : 0;
  uint64_t end = r.size() - kEndSize;
  while (true) {
    if (r.U32(end) == kEndSignature && end + kEndSize + r.U16(end + 20) == r.size()) break;
    if (end == lowest) return CutShort(r.size(), "its end record is missing");
    --end;
  }
  *count = r.U16(end + 10);
  *size = r.U32(end + 12);
  *offset = r.U32(end + 16);
  const bool zip64 = *count == 0xffff || *size == 0xffffffff || *offset == 0xffffffff;
  if (end >= kZip64LocatorSize && r.U32(end - kZip64LocatorSize) == kZip64LocatorSignature) {
    const uint64_t record = r.U64(end - kZip64LocatorSize + 8);
    if (!r.Has(record, kZip64EndSize) || r.U32(record) != kZip64EndSignature) {
      return Invalid("a damaged zip archive: its zip64 end record is not where the locator says");
    }
    *count = r.U64(record + 32);
    *size = r.U64(record + 40);
    *offset = r.U64(record + 48);
  } else if (zip64) {
    return Invalid("a damaged zip archive: its zip64 end record is missing");
  }
  if (!r.Has(*offset, *size)) {
    return Invalid(absl::StrCat("a damaged zip archive: its directory (", *size, " bytes at ",
                                *offset, ") lies outside the file's ", r.size(), " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TorchArchive::Record> ReadEntry(const Reader& r, uint64_t* p, uint64_t end) {
  if (*p + kCentralSize > end || r.U32(*p) != kCentralSignature) {
    return Invalid(absl::StrCat("a damaged zip archive: no directory entry at offset ", *p));
  }
  TorchArchive::Record rec;
  rec.directory_entry_offset = *p;
  rec.method = r.U16(*p + 10);
  rec.crc32 = r.U32(*p + 16);
  rec.size = r.U32(*p + 20);
  rec.uncompressed_size = r.U32(*p + 24);
  const uint16_t name_len = r.U16(*p + 28);
  const uint16_t extra_len = r.U16(*p + 30);
  const uint16_t comment_len = r.U16(*p + 32);
  uint64_t local = r.U32(*p + 42);
  const uint64_t name = *p + kCentralSize;
  if (name + name_len + extra_len + comment_len > end) {
    return Invalid(absl::StrCat("a damaged zip archive: directory entry at offset ", *p,
                                " runs past the directory"));
  }
  rec.name = std::string(r.Slice(name, name_len));
  std::vector<uint64_t*> wanted;
  if (rec.uncompressed_size == 0xffffffff) wanted.push_back(&rec.uncompressed_size);
  if (rec.size == 0xffffffff) wanted.push_back(&rec.size);
  if (local == 0xffffffff) wanted.push_back(&local);
  if (!wanted.empty()) ApplyZip64Extra(r, name + name_len, extra_len, std::move(wanted));
  *p = name + name_len + extra_len + comment_len;

  if (!r.Has(local, kLocalSize) || r.U32(local) != kLocalSignature) {
    return Invalid(absl::StrCat("a damaged zip archive: record \"", rec.name,
                                "\" has no header at offset ", local));
  }
  rec.local_header_offset = local;
  rec.data_offset = local + kLocalSize + r.U16(local + 26) + r.U16(local + 28);
  if (!r.Has(rec.data_offset, rec.size)) {
    return CutShort(r.size(), absl::StrCat("record \"", rec.name, "\" needs ", rec.size,
                                           " bytes at offset ", rec.data_offset));
  }
  return rec;
}

// torch's `version` record: the archive's file format version.
int64_t FormatVersion(const Reader& r, const TorchArchive& archive) {
  for (const TorchArchive::Record& rec : archive.records) {
    const absl::string_view name = rec.name;
    if (rec.method != 0) continue;
    if (name != absl::StrCat(archive.prefix, "/version") &&
        name != absl::StrCat(archive.prefix, "/.data/version")) {
      continue;
    }
    int64_t version = -1;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(r.Slice(rec.data_offset, rec.size)),
                         &version)) {
      return version;
    }
  }
  return -1;
}

absl::StatusOr<uint32_t> Crc32Of(const Reader& r, const TorchArchive::Record& rec) {
  const absl::string_view data = r.Slice(rec.data_offset, rec.size);
  if (rec.method == 0) return Crc32(data);
  if (rec.method != 8) {
    return Invalid(absl::StrCat("record \"", rec.name, "\" uses zip compression method ",
                                rec.method, ", which libkd does not read (torch writes 0)"));
  }
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return absl::InternalError("zlib inflateInit2");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(std::min<size_t>(data.size(), 0xffffffffu));
  uLong crc = crc32(0L, Z_NULL, 0);
  unsigned char out[1 << 15];
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = out;
    z.avail_out = sizeof(out);
    rc = inflate(&z, Z_NO_FLUSH);
    crc = crc32(crc, out, static_cast<uInt>(sizeof(out) - z.avail_out));
    if (rc == Z_BUF_ERROR && z.avail_in == 0) break;
  }
  inflateEnd(&z);
  if (rc != Z_STREAM_END) {
    return absl::DataLossError(
        absl::StrCat("record \"", rec.name, "\" is corrupted: its deflate stream is damaged"));
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace

uint32_t Crc32(absl::string_view data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t done = 0; done < data.size();) {  // zlib takes uInt lengths
    const size_t n = std::min<size_t>(data.size() - done, 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data() + done), static_cast<uInt>(n));
    done += n;
  }
  return static_cast<uint32_t>(crc);
}

std::string DescribeKind(TorchArchive::Kind kind) {
  switch (kind) {
    case TorchArchive::Kind::kTorchScript:
      return "a TorchScript archive (torch.jit.save)";
    case TorchArchive::Kind::kTorchSave:
      return "a torch.save archive";
    case TorchArchive::Kind::kOtherZip:
      break;
  }
  return "a zip archive that torch did not write (no data.pkl)";
}

absl::Status CheckTorchArchiveHead(absl::string_view head, uint64_t size) {
  if (absl::StartsWith(head, kLegacyTorchSave)) {
    return Invalid(
        "a legacy torch.save file (the pre-1.6 format, _use_new_zipfile_serialization=False), "
        "which libtorch cannot read: load it in Python and save it again with torch.save's "
        "default format");
  }
  if (size < 4 || !absl::StartsWith(head, "PK\x03\x04")) {
    return Invalid(absl::StrCat(
        "not a zip archive (", size, " bytes",
        head.empty() ? ""
                     : absl::StrFormat(" beginning 0x%02x", static_cast<unsigned char>(head[0])),
        "), so neither torch.jit.save nor torch.save wrote it"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TorchArchive> InspectTorchArchive(absl::string_view bytes) {
  KD_RETURN_IF_ERROR(CheckTorchArchiveHead(bytes.substr(0, kLegacyTorchSave.size()), bytes.size()));
  const Reader r(bytes);
  uint64_t offset = 0, size = 0, count = 0;
  if (absl::Status s = FindDirectory(r, &offset, &size, &count); !s.ok()) return s;
  TorchArchive archive;
  uint64_t p = offset;
  // Each entry takes at least kCentralSize bytes: a count beyond that is damage, not a reason
  // to reserve.
  archive.records.reserve(std::min<uint64_t>(count, size / kCentralSize));
  // Record names are unique: with two records of one name, which one a reader takes is its own
  // choice (miniz takes the first, Python's zipfile the last), so the archive means two things.
  absl::flat_hash_set<std::string> names;
  for (uint64_t i = 0; i < count; ++i) {
    absl::StatusOr<TorchArchive::Record> rec = ReadEntry(r, &p, offset + size);
    if (!rec.ok()) return rec.status();
    if (!names.insert(rec->name).second) {
      return Invalid(absl::StrCat("a damaged zip archive: record \"", rec->name,
                                  "\" appears twice, and readers disagree on which one counts; "
                                  "save the file again"));
    }
    archive.records.push_back(*std::move(rec));
  }
  bool data_pkl = false, code = false;
  if (!archive.records.empty()) {
    const std::string& first = archive.records.front().name;
    archive.prefix = first.substr(0, first.find('/'));
  }
  for (const TorchArchive::Record& rec : archive.records) {
    const absl::string_view name = rec.name;
    if (!absl::StartsWith(name, archive.prefix + "/")) continue;
    const absl::string_view rest = name.substr(archive.prefix.size() + 1);
    data_pkl |= rest == "data.pkl";
    code |= rest == "constants.pkl" || absl::StartsWith(rest, "code/");
  }
  archive.kind = !data_pkl ? TorchArchive::Kind::kOtherZip
                 : code    ? TorchArchive::Kind::kTorchScript
                           : TorchArchive::Kind::kTorchSave;
  archive.format_version = FormatVersion(r, archive);
  return archive;
}

absl::StatusOr<TorchArchive> VerifyTorchArchive(absl::string_view bytes) {
  absl::StatusOr<TorchArchive> archive = InspectTorchArchive(bytes);
  if (!archive.ok()) return archive;
  const Reader r(bytes);
  for (const TorchArchive::Record& rec : archive->records) {
    absl::StatusOr<uint32_t> crc = Crc32Of(r, rec);
    if (!crc.ok()) return crc.status();
    if (*crc != rec.crc32) {
      return absl::DataLossError(absl::StrFormat(
          "record \"%s\" is corrupted: its CRC-32 is %08x where the archive's directory says "
          "%08x (the file was damaged after it was written: copy or save it again)",
          rec.name, *crc, rec.crc32));
    }
  }
  return archive;
}

}  // namespace kd
