#include "base/torch_archive.h"

#include <string>

#include "base/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Fixture(const std::string& name) {
  absl::StatusOr<std::string> bytes = ReadFile("tests/testdata/" + name);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.value_or("");
}

const TorchArchive::Record* Find(const TorchArchive& archive, const std::string& suffix) {
  for (const TorchArchive::Record& r : archive.records) {
    if (r.name.size() >= suffix.size() &&
        r.name.compare(r.name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return &r;
    }
  }
  return nullptr;
}

TEST(TorchArchiveTest, TellsTorchScriptFromTorchSave) {
  absl::StatusOr<TorchArchive> model = VerifyTorchArchive(Fixture("small_cnn.pt"));
  ASSERT_THAT(model, IsOk());
  EXPECT_EQ(model->kind, TorchArchive::Kind::kTorchScript);
  EXPECT_EQ(model->prefix, "small_cnn");
  EXPECT_NE(Find(*model, "/constants.pkl"), nullptr);
  // torch 2.x writes format version 10 (caffe2/serialize/versions.h's kProducedFileFormatVersion
  // for modules with no newer operators... read from the file, not assumed: positive).
  EXPECT_GT(model->format_version, 0);

  absl::StatusOr<TorchArchive> state = VerifyTorchArchive(Fixture("small_cnn.state.pt"));
  ASSERT_THAT(state, IsOk());
  EXPECT_EQ(state->kind, TorchArchive::Kind::kTorchSave);
  EXPECT_NE(Find(*state, "/data.pkl"), nullptr);
}

TEST(TorchArchiveTest, ACorruptedRecordIsNamed) {
  std::string bytes = Fixture("small_cnn.state.pt");
  absl::StatusOr<TorchArchive> archive = InspectTorchArchive(bytes);
  ASSERT_THAT(archive, IsOk());
  const TorchArchive::Record* data = Find(*archive, "/data/0");
  ASSERT_NE(data, nullptr);
  ASSERT_GT(data->size, 3u);
  bytes[data->data_offset + 3] ^= 0x10;  // one bit of the first tensor's storage
  EXPECT_THAT(VerifyTorchArchive(bytes),
              StatusIs(absl::StatusCode::kDataLoss,
                       StartsWith("record \"" + data->name + "\" is corrupted: its CRC-32 is")));
  // Inspection alone does not read the records' contents.
  EXPECT_THAT(InspectTorchArchive(bytes), IsOk());
}

TEST(TorchArchiveTest, EveryRecordIsChecked) {
  const std::string original = Fixture("small_cnn.pt");
  absl::StatusOr<TorchArchive> archive = InspectTorchArchive(original);
  ASSERT_THAT(archive, IsOk());
  int checked = 0;
  for (const TorchArchive::Record& r : archive->records) {
    if (r.size == 0) continue;
    std::string bytes = original;
    bytes[r.data_offset + r.size / 2] ^= 0x01;
    EXPECT_THAT(VerifyTorchArchive(bytes),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("\"" + r.name + "\"")));
    ++checked;
  }
  EXPECT_GT(checked, 5);
}

TEST(TorchArchiveTest, TruncatedFilesAreCutShort) {
  const std::string bytes = Fixture("small_cnn.pt");
  for (size_t keep : {bytes.size() - 1, bytes.size() / 2, size_t{100}, size_t{10}}) {
    EXPECT_THAT(InspectTorchArchive(bytes.substr(0, keep)),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cut short")))
        << keep;
  }
}

TEST(TorchArchiveTest, NamesWhatIsNotAnArchive) {
  EXPECT_THAT(InspectTorchArchive(Fixture("small_cnn.legacy_state.pt")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       StartsWith("a legacy torch.save file (the pre-1.6 format")));
  EXPECT_THAT(InspectTorchArchive("student { }"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       StartsWith("not a zip archive (11 bytes beginning 0x73)")));
  EXPECT_THAT(InspectTorchArchive(""), StatusIs(absl::StatusCode::kInvalidArgument,
                                                StartsWith("not a zip archive (0 bytes)")));
}

// Two records of one name: miniz reads the first, Python's zipfile the last; refused.
TEST(TorchArchiveTest, DuplicateRecordNamesAreRefused) {
  std::string bytes = Fixture("small_cnn.state.pt");
  absl::StatusOr<TorchArchive> archive = InspectTorchArchive(bytes);
  ASSERT_THAT(archive, IsOk());
  // A record whose name is in no other record's name (so its last occurrence in the file is its
  // central directory entry, which comes after the records' data) renamed after another record
  // of a name as long.
  const TorchArchive::Record* first = nullptr;
  const TorchArchive::Record* second = nullptr;
  for (const TorchArchive::Record& r : archive->records) {
    bool inside_another = false;
    for (const TorchArchive::Record& o : archive->records) {
      inside_another |= &o != &r && o.name.find(r.name) != std::string::npos;
    }
    if (inside_another) continue;
    for (const TorchArchive::Record& o : archive->records) {
      if (&o != &r && o.name.size() == r.name.size()) first = &o, second = &r;
    }
    if (second != nullptr) break;
  }
  ASSERT_NE(second, nullptr);
  const size_t at = bytes.rfind(second->name);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, first->name.size(), first->name);
  EXPECT_THAT(InspectTorchArchive(bytes),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "a damaged zip archive: record \"" + first->name +
                           "\" appears twice, and readers disagree on which one counts; save the "
                           "file again"));
}

TEST(TorchArchiveTest, DirectoryOutsideTheFileIsDamage) {
  std::string bytes = Fixture("small_cnn.state.pt");
  // The end record's directory offset (its bytes 16..19) pointed past the end.
  const size_t end = bytes.rfind(std::string("PK\x05\x06", 4));
  ASSERT_NE(end, std::string::npos);
  if (bytes.rfind(std::string("PK\x06\x07", 4)) == std::string::npos) {
    bytes[end + 19] = '\x7f';
    EXPECT_THAT(InspectTorchArchive(bytes),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside the file")));
  }
}

TEST(PickleBoundsTest, LengthsMustFitWhatIsLeft) {
  // PROTO 2, SHORT_BINUNICODE "ab", STOP.
  EXPECT_THAT(CheckPickleBounds(std::string("\x80\x02\x8c\x02"
                                            "ab.",
                                            7)),
              IsOk());
  // PROTO 2, BINUNICODE claiming 0xfffffff0 bytes, then 3: what made libtorch's unpickler
  // allocate 4 GB (found by //fuzz:checkpoint_fuzzer).
  EXPECT_THAT(CheckPickleBounds(std::string("\x80\x02X\xf0\xff\xff\xff"
                                            "abc.",
                                            11)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "a damaged pickle: opcode 0x58 at offset 2 gives a length of 4294967280 "
                       "bytes where 4 are left"));
  // LONG_BINPUT of memo id 0x53000000 after no other: libtorch's unpickler grew its memo table
  // to that id (22 GB; found by //fuzz:checkpoint_fuzzer).
  EXPECT_THAT(CheckPickleBounds(std::string("\x80\x02Nr\x00\x00\x00\x53.", 9)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "a damaged pickle: opcode 0x72 at offset 3 stores memo id 1392508928 where "
                       "the next is 0"));
  EXPECT_THAT(CheckPickleBounds(std::string("\x80\x02Nq\x00Nq\x01Nq\x00.", 12)), IsOk());
  EXPECT_THAT(CheckPickleBounds(std::string("\x80\x02\xff.", 4)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "a damaged pickle: opcode 0xff at offset 2 is not a pickle opcode"));
  EXPECT_THAT(CheckPickleBounds(std::string("\x80\x02N", 3)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("without a STOP")));
  EXPECT_THAT(CheckPickleBounds("ccollections\nOrderedDict"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has no end of line")));
}

TEST(PickleBoundsTest, EveryFixtureSavedByTorchPasses) {
  for (const char* name : {"small_cnn.state.pt", "small_cnn.expected.pt", "tricky.kwargs.pt",
                           "tricky.ordered_state.pt", "losses.expected.pt"}) {
    const std::string bytes = Fixture(name);
    absl::StatusOr<TorchArchive> archive = InspectTorchArchive(bytes);
    ASSERT_THAT(archive, IsOk()) << name;
    const TorchArchive::Record* pkl = Find(*archive, "/data.pkl");
    ASSERT_NE(pkl, nullptr) << name;
    EXPECT_THAT(CheckPickleBounds(absl::string_view(bytes).substr(pkl->data_offset, pkl->size)),
                IsOk())
        << name;
  }
}

}  // namespace
}  // namespace kd
